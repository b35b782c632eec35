"""The sorted-deps cache (ext/depsort/sorted_deps_cache.hpp) through the AsyncDepsInfo stand-in.

Each mutation point of AsyncDepsInfo must drop exactly the cached vectors whose set changed, and
every answer must equal sorting the set as stored (the uncached behaviour).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from compile_ahead.profiling.npu_patches import depsort

_depsort = depsort.native()

# 0 <- 1 <- 3, 0 <- 2 <- 3, 2 <- 4
DIAMOND = [[], [0], [0], [1, 2], [2]]


def cached_all(model) -> tuple[list[bool], list[bool]]:
    deps = [model.deps_cached(i) for i in range(model.op_count)]
    cons = (
        [model.consumers_cached(i) for i in range(model.op_count)] if model.consumers_built else []
    )
    return deps, cons


def warm(model) -> None:
    for i in range(model.op_count):
        model.op_deps(i)
        if model.consumers_built:
            model.consumer_ops(i)


def assert_matches_sorted_sets(model) -> None:
    for i in range(model.op_count):
        assert model.op_deps(i) == sorted(model.raw_deps(i))
        if model.consumers_built:
            assert model.consumer_ops(i) == sorted(model.raw_consumers(i))


def test_first_query_sorts_and_second_is_a_hit():
    model = _depsort.DepsModel([[], [], [1, 0]])
    _depsort.reset_counters()
    assert not model.deps_cached(2)
    assert model.op_deps(2) == [0, 1]
    assert model.deps_cached(2)
    assert model.op_deps(2) == [0, 1]
    c = _depsort.counters()
    assert (c["requests"], c["hits"], c["misses"], c["elements_sorted"]) == (2, 1, 1, 2)


def test_answers_are_sorted_even_when_the_set_iterates_out_of_order():
    deps = [[], *[[] for _ in range(40)], list(range(40, 0, -1))]
    model = _depsort.DepsModel(deps)
    assert model.raw_deps(41) != sorted(model.raw_deps(41))  # the set's own order is not sorted
    assert model.op_deps(41) == list(range(1, 41))


def test_add_dependency_invalidates_the_target_deps_and_the_source_consumers_only():
    model = _depsort.DepsModel(DIAMOND)
    model.build_consumers()
    warm(model)
    model.add_dependency(1, 4)
    deps, cons = cached_all(model)
    assert deps == [True, True, True, True, False]
    assert cons == [True, False, True, True, True]
    assert model.op_deps(4) == [1, 2]
    assert model.consumer_ops(1) == [3, 4]
    assert_matches_sorted_sets(model)


def test_add_dependency_already_present_invalidates_nothing():
    model = _depsort.DepsModel(DIAMOND)
    model.build_consumers()
    warm(model)
    model.add_dependency(2, 4)
    assert cached_all(model) == ([True] * 5, [True] * 5)


def test_add_dependency_before_the_consumer_map_exists_touches_deps_only():
    model = _depsort.DepsModel(DIAMOND)
    warm(model)
    model.add_dependency(0, 4)
    assert cached_all(model)[0] == [True, True, True, True, False]
    model.build_consumers()
    assert model.consumer_ops(0) == [1, 2, 4]


def test_duplicate_dep_with_new_consumer_entry_invalidates_the_consumer_side():
    # insert_op records the deps but not the consumers (as upstream); the addDependency that
    # follows inserts nothing into the deps set but does insert into the consumer set.
    model = _depsort.DepsModel(DIAMOND)
    model.build_consumers()
    model.pre_allocate(1)
    warm(model)
    new = model.insert_op([3])
    assert model.consumer_ops(3) == []
    model.op_deps(new)
    model.add_dependency(3, new)
    assert model.deps_cached(new)
    assert not model.consumers_cached(3)
    assert model.consumer_ops(3) == [new]


def test_insert_op_grows_the_cache_and_leaves_existing_entries_cached():
    model = _depsort.DepsModel(DIAMOND)
    model.build_consumers()
    warm(model)
    new = model.insert_op([4, 1])
    assert new == 5 and model.op_count == 6 and model.capacity == 6
    deps, cons = cached_all(model)
    assert deps == [True] * 5 + [False]
    assert cons == [True] * 5 + [False]
    assert model.op_deps(new) == [1, 4]


def test_pre_allocate_then_insert_uses_the_reserved_slot():
    model = _depsort.DepsModel(DIAMOND)
    model.pre_allocate(3)
    assert model.capacity == 8 and model.op_count == 5
    warm(model)
    assert model.insert_op([0]) == 5
    assert model.capacity == 8
    assert cached_all(model)[0] == [True] * 5 + [False]
    with pytest.raises(IndexError):
        model.op_deps(6)


def test_build_consumers_again_keeps_unchanged_entries_and_drops_changed_ones():
    model = _depsort.DepsModel(DIAMOND)
    model.build_consumers()
    warm(model)
    model.build_consumers()  # nothing new: every entry stays
    assert cached_all(model)[1] == [True] * 5
    model.insert_op([3])  # deps only; the next build adds 5 to consumers of 3
    model.build_consumers()
    assert cached_all(model)[1] == [True, True, True, False, True, False]
    assert model.consumer_ops(3) == [5]


def test_optimize_drops_every_cached_vector_and_answers_the_reduced_sets():
    model = _depsort.DepsModel([[], [0], [0, 1], [0, 1, 2]])
    model.build_consumers()
    warm(model)
    model.optimize()
    assert cached_all(model) == ([False] * 4, [False] * 4)
    assert [model.op_deps(i) for i in range(4)] == [[], [0], [1], [2]]
    assert [model.consumer_ops(i) for i in range(4)] == [[1], [2], [3], []]


def test_optimize_invalidates_a_set_that_became_empty():
    # 1 consumed 0 and 2; after reduction 0's consumers shrink: no insert happens for it, so
    # only the wholesale invalidation at the clear keeps its cached vector from going stale.
    model = _depsort.DepsModel([[], [0], [0, 1]])
    model.build_consumers()
    assert model.consumer_ops(0) == [1, 2]
    model.optimize()
    assert model.consumer_ops(0) == [1]


def test_consumer_queries_need_the_consumer_map():
    model = _depsort.DepsModel(DIAMOND)
    with pytest.raises(RuntimeError, match="consumer map"):
        model.consumer_ops(0)


def test_every_mode_gives_the_answers_of_sorting_every_time():
    results = {}
    for mode in ("cached", "shadow", "uncached", "upstream"):
        model = _depsort.DepsModel(DIAMOND, mode=mode)
        model.build_consumers()
        model.add_dependency(1, 4)
        model.insert_op([4, 0])
        results[mode] = [(model.op_deps(i), model.consumer_ops(i)) for i in range(6)] * 2
    assert len({repr(r) for r in results.values()}) == 1
    with pytest.raises(ValueError, match="mode"):
        _depsort.DepsModel(DIAMOND, mode="fast")


def test_counters_add_up_and_reset():
    _depsort.reset_counters()
    model = _depsort.DepsModel(DIAMOND)
    model.build_consumers()
    for _ in range(3):
        warm(model)
    model.add_dependency(0, 4)
    warm(model)
    c = _depsort.counters()
    assert c["hits"] + c["misses"] == c["requests"] == 40
    assert c["misses"] == 10 + 2  # first round, then op 4's deps and op 0's consumers
    assert c["invalidations"] == 2
    assert c["elements_sorted"] == 2 * 5 + 2 + 3  # all edges twice, then {0, 2} and {1, 2, 4}
    _depsort.reset_counters()
    c = _depsort.counters()
    assert c["version"] == 1
    assert all(v == 0 for k, v in c.items() if k != "version")


def test_uncached_mode_counts_every_request_as_a_miss():
    _depsort.reset_counters()
    model = _depsort.DepsModel(DIAMOND, mode="uncached")
    warm(model)
    warm(model)
    c = _depsort.counters()
    assert (c["requests"], c["hits"], c["misses"]) == (10, 0, 10)
    assert not model.deps_cached(3)


def test_shadow_mode_verifies_hits():
    _depsort.reset_counters()
    model = _depsort.DepsModel(DIAMOND, mode="shadow")
    warm(model)
    warm(model)
    assert _depsort.counters()["shadow_checks"] == 5


def _run_python(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=60,
    )


def test_shadow_mode_aborts_with_a_clear_message_on_a_stale_entry():
    code = """
        from compile_ahead import _depsort
        model = _depsort.DepsModel([[], [0], [0, 1]], mode="shadow")
        model.op_deps(1)
        model.insert_dep_without_invalidation(2, 1)  # a mutation point that forgot to invalidate
        model.op_deps(1)
        print("not reached")
    """
    done = _run_python(code)
    assert done.returncode == -6  # SIGABRT
    assert "not reached" not in done.stdout
    assert "shadow check FAILED" in done.stderr
    assert "dependency vector of op 1" in done.stderr


def test_the_same_stale_entry_goes_unnoticed_without_shadow_mode():
    # The hook above is a real fault: the cached mode returns the stale vector. This is what
    # shadow mode exists to catch.
    model = _depsort.DepsModel([[], [0], [0, 1]])
    model.op_deps(1)
    model.insert_dep_without_invalidation(2, 1)
    assert model.op_deps(1) == [0]
    assert sorted(model.raw_deps(1)) == [0, 2]


def probe_library() -> Path:
    return Path(_depsort.__file__).with_name("libcompile_ahead_depsort_probe.so")


def test_no_loaded_counters_without_a_patched_library():
    code = """
        from compile_ahead.profiling.npu_patches import depsort
        print(depsort.read_loaded_counters(), depsort.reset_loaded_counters())
    """
    done = _run_python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["None", "False"]


def test_counters_of_a_library_loaded_rtld_local_are_found_and_reset():
    # In a child process: once loaded, the stand-in library would stay visible to every later
    # test in this process that expects no patched compiler.
    code = f"""
        import ctypes, json, os
        from compile_ahead.profiling.npu_patches import depsort
        lib = ctypes.CDLL({str(probe_library())!r}, mode=os.RTLD_LOCAL)
        assert depsort.reset_loaded_counters()
        checksum = lib.compile_ahead_depsort_probe_run(4)
        first = depsort.read_loaded_counters()
        reset = depsort.reset_loaded_counters()
        after = depsort.read_loaded_counters()
        print(json.dumps([checksum, first.__dict__, first.hit_rate, reset, after.requests]))
    """
    done = _run_python(code)
    assert done.returncode == 0, done.stderr
    checksum, first, hit_rate, reset, after = json.loads(done.stdout)
    assert checksum == 4 * (0 + 0 + 1)
    assert Path(first["library"]).resolve() == probe_library().resolve()
    assert (first["requests"], first["hits"], first["misses"]) == (12, 9, 3)
    assert hit_rate == pytest.approx(0.75)
    assert reset and after == 0
