"""Random interleavings of AsyncDepsInfo mutations and queries against an uncached reference.

The reference is plain Python: the same maps as sets, answered by ``sorted()`` on every query.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compile_ahead.profiling.npu_patches import depsort

_depsort = depsort.native()


class Reference:
    """AsyncDepsInfo's maps, answering queries by sorting every time."""

    def __init__(self, deps: list[list[int]]):
        self.deps = [set(d) for d in deps]
        self.consumers: list[set[int]] = []  # empty list = consumer map not built
        self.count = len(deps)

    def add_dependency(self, src: int, dst: int) -> None:
        self.deps[dst].add(src)
        if self.consumers:
            self.consumers[src].add(dst)

    def pre_allocate(self, n: int) -> None:
        # Upstream resizes both maps to the new size, which also makes a consumer map that was
        # never built non-empty (and so "built" for addDependency / getConsumerOps).
        self.deps += [set() for _ in range(n)]
        self.consumers += [set() for _ in range(len(self.deps) - len(self.consumers))]

    def insert_op(self, deps: list[int]) -> int:
        if self.count == len(self.deps):
            self.pre_allocate(1)
        self.deps[self.count] |= set(deps)
        self.count += 1
        return self.count - 1

    def build_consumers(self) -> None:
        self.consumers += [set() for _ in range(len(self.deps) - len(self.consumers))]
        for op, deps in enumerate(self.deps):
            for dep in deps:
                self.consumers[dep].add(op)

    def optimize(self) -> None:
        reach: dict[int, set[int]] = {}

        def ancestors(op: int) -> set[int]:
            if op not in reach:
                found: set[int] = set()
                for dep in self.deps[op]:
                    found |= {dep} | ancestors(dep)
                reach[op] = found
            return reach[op]

        for op in range(self.count):
            ancestors(op)
        for op in range(self.count):
            direct = set(self.deps[op])
            self.deps[op] = {d for d in direct if not any(d in reach[o] for o in direct - {d})}
        if self.consumers:
            self.consumers = []
            self.build_consumers()

    def op_deps(self, op: int) -> list[int]:
        return sorted(self.deps[op])

    def consumer_ops(self, op: int) -> list[int]:
        return sorted(self.consumers[op])


# Indices are drawn as free integers and reduced modulo the current op count when applied,
# so every drawn program is valid whatever the graph has grown to.
steps = st.lists(
    st.one_of(
        st.tuples(st.just("query_deps"), st.integers(0, 10**6)),
        st.tuples(st.just("query_consumers"), st.integers(0, 10**6)),
        st.tuples(st.just("add"), st.integers(0, 10**6), st.integers(0, 10**6)),
        st.tuples(st.just("insert"), st.lists(st.integers(0, 10**6), max_size=4)),
        st.tuples(st.just("pre_allocate"), st.integers(1, 3)),
        st.tuples(st.just("build_consumers")),
        st.tuples(st.just("optimize")),
    ),
    max_size=60,
)

initial_graphs = st.integers(2, 12).flatmap(
    lambda n: st.tuples(
        *[st.lists(st.integers(0, max(0, i - 1)), max_size=min(i, 4)) for i in range(n)]
    ).map(lambda deps: [sorted(set(d)) if i else [] for i, d in enumerate(deps)])
)


def run_program(initial: list[list[int]], program: list[tuple], mode: str) -> None:
    model = _depsort.DepsModel(initial, mode=mode)
    ref = Reference(initial)
    for step in program:
        kind = step[0]
        if kind == "query_deps":
            op = step[1] % ref.count
            assert model.op_deps(op) == ref.op_deps(op), (kind, op)
        elif kind == "query_consumers":
            if ref.consumers:
                op = step[1] % ref.count
                assert model.consumer_ops(op) == ref.consumer_ops(op), (kind, op)
        elif kind == "add":
            # Edges go from a lower to a higher index: the graph stays acyclic for optimize().
            a, b = step[1] % ref.count, step[2] % ref.count
            if a != b:
                src, dst = min(a, b), max(a, b)
                model.add_dependency(src, dst)
                ref.add_dependency(src, dst)
        elif kind == "insert":
            deps = sorted({d % ref.count for d in step[1]})
            assert model.insert_op(deps) == ref.insert_op(deps)
        elif kind == "pre_allocate":
            model.pre_allocate(step[1])
            ref.pre_allocate(step[1])
        elif kind == "build_consumers":
            model.build_consumers()
            ref.build_consumers()
        elif kind == "optimize":
            model.optimize()
            ref.optimize()
        assert model.op_count == ref.count
        assert model.consumers_built == bool(ref.consumers)
    for op in range(ref.count):
        assert model.op_deps(op) == ref.op_deps(op)
        if ref.consumers:
            assert model.consumer_ops(op) == ref.consumer_ops(op)


COMMON = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@COMMON
@given(initial=initial_graphs, program=steps)
def test_cached_answers_equal_sorting_every_time(initial, program):
    run_program(initial, program, "cached")


@COMMON
@given(initial=initial_graphs, program=steps)
def test_shadow_mode_never_trips_on_valid_programs(initial, program):
    # A stale entry would abort the whole test process here: shadow mode verifies every hit.
    run_program(initial, program, "shadow")


@settings(max_examples=60, deadline=None)
@given(initial=initial_graphs, program=steps)
def test_counters_add_up_over_any_program(initial, program):
    _depsort.reset_counters()
    run_program(initial, program, "cached")
    c = _depsort.counters()
    assert c["hits"] + c["misses"] == c["requests"]
    assert c["requests"] >= len(initial)
