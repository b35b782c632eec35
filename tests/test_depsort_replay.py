"""The scheduler replay on real-model op graphs: cached and uncached give the same answers."""

from __future__ import annotations

import random

import pytest

from compile_ahead.profiling.npu_patches import depsort

_depsort = depsort.native()


@pytest.fixture(scope="module")
def qwen05_graph() -> depsort.OpGraph:
    return depsort.preset_op_graph("qwen2.5-0.5b", tile_bytes=1 << 19, max_tiles=2)


def test_op_graph_mirrors_the_openvino_model():
    import openvino as ov
    import openvino.opset13 as ops

    x = ops.parameter([1, 4], ov.Type.f32, name="x")
    w = ops.constant([[1.0] * 4] * 4, ov.Type.f32)
    y = ops.relu(ops.matmul(x, ops.convert(w, ov.Type.f32), False, False))
    model = ov.Model([ops.result(y)], [x], "tiny")
    graph = depsort.op_graph_from_model(model, "tiny")
    names = [op.get_type_name() for op in model.get_ordered_ops()]
    by_type = {t: i for i, t in enumerate(names)}
    assert graph.op_count == len(names)
    assert graph.deps[by_type["MatMul"]] == sorted([by_type["Parameter"], by_type["Convert"]])
    assert graph.is_data[by_type["Constant"]] and graph.is_data[by_type["Convert"]]
    assert not graph.is_data[by_type["Parameter"]] and not graph.is_data[by_type["MatMul"]]
    assert graph.bytes[by_type["Constant"]] == 16 * 4


def test_tiling_splits_large_ops_and_caps_their_buffers():
    import openvino as ov
    import openvino.opset13 as ops

    x = ops.parameter([1, 64], ov.Type.f32, name="x")
    w = ops.constant([[0.5] * 256] * 64, ov.Type.f32)  # 64 KiB
    y = ops.matmul(x, w, False, False)
    model = ov.Model([ops.result(y)], [x], "tiled")
    graph = depsort.op_graph_from_model(model, "tiled", tile_bytes=16384, max_tiles=4)
    # Parameter, 4 weight tiles, 1 MatMul (1 KiB output), Result
    assert graph.op_count == 7
    assert sum(graph.is_data) == 4
    assert max(graph.bytes) == 16384
    matmul = 5
    assert graph.deps[matmul] == [0, 1]  # the activation and weight tile 0


def random_dag(n: int, seed: int) -> depsort.OpGraph:
    rng = random.Random(seed)
    deps = [sorted(rng.sample(range(i), min(i, rng.randint(0, 3)))) for i in range(n)]
    is_data = [not d and rng.random() < 0.5 for d in deps]
    sizes = [rng.randint(1, 64) * 1024 for _ in range(n)]
    return depsort.OpGraph("random", deps, is_data, sizes)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_replay_on_random_dags_gives_identical_answers(seed):
    graph = random_dag(300, seed)
    trace = _depsort.record(graph.deps, graph.is_data, graph.bytes, memory_bytes=256 * 1024)
    results = {m: _depsort.replay(trace, m) for m in ("upstream", "cached", "shadow")}
    assert len({r["checksum"] for r in results.values()}) == 1
    for mode in ("cached", "shadow"):
        r = results[mode]
        assert r["hits"] + r["misses"] == r["requests"] == results["upstream"]["requests"]
    assert trace.spills > 0  # the memory limit forced spill-op insertions


def test_replay_on_qwen_graph_exercises_every_mutation_and_matches(qwen05_graph):
    trace = _depsort.record(
        qwen05_graph.deps, qwen05_graph.is_data, qwen05_graph.bytes, prefetch_levels=8
    )
    counts = trace.counts()
    assert counts["insert_op"] == 2 * trace.spills > 0
    assert counts["add_dependency"] > 0 and trace.control_edges > 0
    assert counts["optimize"] == 1 and counts["build_consumers"] == 2
    cached = _depsort.replay(trace, "cached")
    upstream = _depsort.replay(trace, "upstream")
    assert cached["checksum"] == upstream["checksum"]
    assert cached["elements_returned"] == upstream["elements_returned"]
    assert cached["requests"] == counts["query_deps"] + counts["query_consumers"]
    assert cached["hits"] + cached["misses"] == cached["requests"]
    assert cached["hits"] > 0 and cached["invalidations"] > 0
    assert _depsort.counters()["requests"] == 0  # the upstream path has no cache, no counters
