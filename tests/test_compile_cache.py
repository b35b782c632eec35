"""The compile cache: a hit is the same graph, anything that changes the graph never hits, and
an unusable entry is recompiled with a warning."""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from compile_ahead.commands import cache_options
from compile_ahead.runtime.compile.cache import entry_format, keys, store
from compile_ahead.runtime.compile.graph.split_step import WeightParts, compile_attention_core
from compile_ahead.runtime.compile.graph.step_compile import compile_step
from compile_ahead.runtime.compile.settings.options import CompileOptions
from compile_ahead.runtime.graphs.spec import GraphSpec
from compile_ahead.runtime.ladder.runner import run_ladder
from compile_ahead.runtime.ladder.settings.capacities import Ladder
from compile_ahead.runtime.ladder.settings.config import RunConfig
from compile_ahead.runtime.ladder.settings.run_protocol import teacher_forced
from compile_ahead.runtime.ladder.settings.schedules import SCHEDULES
from compile_ahead.runtime.model.kv_arena import KVArena
from compile_ahead.runtime.sources.resolve import resolve_model
from compile_ahead.runtime.sources.synthetic import synthetic_source
from conftest import wait_until_settled

SPEC = GraphSpec(64, 1, "f32")


@pytest.fixture(scope="module")
def tiny():
    return resolve_model("tiny")  # the synthetic checkpoint, in the session's private cache


@pytest.fixture
def cache(tmp_path) -> store.CompileCache:
    return store.CompileCache(tmp_path / "compiled")


def f32(cache: store.CompileCache | None, **kw) -> CompileOptions:
    return CompileOptions(device="CPU", inference_precision="f32", cache=cache, **kw)


def logits(step, cfg, capacity: int = 64, past: int = 5) -> np.ndarray:
    arena = KVArena(cfg, capacity, "f32")
    rng = np.random.default_rng(0)
    for buf in arena.keys + arena.values:
        buf[...] = rng.standard_normal(buf.shape, dtype=np.float32)
    step.bind(arena)
    return step.run(np.array([7]), past).logits.copy()


def entries(cache: store.CompileCache) -> list[Path]:
    return sorted(cache.directory.rglob("*" + entry_format.SUFFIX))


def test_hit_returns_the_same_logits_as_a_compile(tiny, cache):
    reference = logits(compile_step(tiny, SPEC, f32(None)).step, tiny.config)
    miss = compile_step(tiny, SPEC, f32(cache))
    assert miss.cache.state == "miss" and miss.compile_s > 0 and len(entries(cache)) == 1
    hit = compile_step(tiny, SPEC, f32(cache))
    assert hit.cache.state == "hit" and hit.compile_s == 0.0 and hit.import_s > 0
    assert 0 < hit.verify_s <= hit.import_s and hit.pending_store is None
    # What the cache did is the result's, never an attribute set on the step.
    assert not {"compile_cache", "store_pending"} & set(vars(hit.step))
    assert np.array_equal(logits(hit.step, tiny.config), reference)
    assert np.array_equal(logits(miss.step, tiny.config), reference)


def test_off_without_a_cache(tiny, cache):
    result = compile_step(tiny, SPEC, f32(None))
    assert result.cache.state == "off" and result.import_s == 0.0
    assert not cache.directory.exists()


def test_changed_graph_precision_or_model_never_hits(tiny, cache, tiny_qwen2_dir, tmp_path):
    assert compile_step(tiny, SPEC, f32(cache)).cache.state == "miss"
    other_seed = synthetic_source("tiny", seed=1)
    real = resolve_model(str(tiny_qwen2_dir))
    variants = {
        "capacity": (tiny, GraphSpec(128, 1, "f32"), f32(cache)),
        "buffer capacity": (tiny, GraphSpec(64, 1, "f32", buffer_capacity=128), f32(cache)),
        "graph kind": (tiny, GraphSpec(64, 4, "f32"), f32(cache)),
        "kv precision": (tiny, GraphSpec(64, 1, "f16"), f32(cache, kv_precision="f16")),
        "inference precision": (tiny, SPEC, replace(f32(cache), inference_precision="bf16")),
        "device config": (tiny, SPEC, f32(cache, extra_config={"PERFORMANCE_HINT": "THROUGHPUT"})),
        "weights (seed)": (other_seed, SPEC, f32(cache)),
        "weights (checkpoint)": (real, SPEC, f32(cache)),
    }
    for what, (source, spec, options) in variants.items():
        assert compile_step(source, spec, options).cache.state == "miss", what
    assert len(entries(cache)) == 1 + len(variants)
    # Every variant is cached under its own key.
    for what, (source, spec, options) in variants.items():
        assert compile_step(source, spec, options).cache.state == "hit", what


def test_a_touched_checkpoint_misses(cache, tiny_qwen2_dir, tmp_path):
    import shutil

    copy = Path(shutil.copytree(tiny_qwen2_dir, tmp_path / "model"))
    wait_until_settled(copy)
    assert compile_step(resolve_model(str(copy)), SPEC, f32(cache)).cache.state == "miss"
    assert compile_step(resolve_model(str(copy)), SPEC, f32(cache)).cache.state == "hit"
    weights = next(copy.glob("*.safetensors"))
    st = weights.stat()
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    wait_until_settled(copy)
    assert compile_step(resolve_model(str(copy)), SPEC, f32(cache)).cache.state == "miss"


def test_openvino_release_is_part_of_the_key(tiny, cache, monkeypatch):
    assert compile_step(tiny, SPEC, f32(cache)).cache.state == "miss"
    import openvino

    monkeypatch.setattr(openvino, "get_version", lambda: "2099.1.0-other")
    assert compile_step(tiny, SPEC, f32(cache)).cache.state == "miss"


@pytest.mark.parametrize("damage", ["truncate", "overwrite", "garbage"])
def test_corrupt_entry_is_recompiled_with_a_warning(tiny, cache, damage):
    reference = logits(compile_step(tiny, SPEC, f32(None)).step, tiny.config)
    compile_step(tiny, SPEC, f32(cache))
    (entry,) = entries(cache)
    size = entry.stat().st_size
    if damage == "truncate":
        with entry.open("r+b") as f:
            f.truncate(size // 2)
    elif damage == "overwrite":
        with entry.open("r+b") as f:
            f.seek(0)
            f.write(b"\xff" * 4096)
    else:
        entry.write_bytes(os.urandom(1000))
    with pytest.warns(store.CompileCacheWarning, match="unusable"):
        again = compile_step(tiny, SPEC, f32(cache))
    assert again.cache.state == "miss"
    assert np.array_equal(logits(again.step, tiny.config), reference)
    hit = compile_step(tiny, SPEC, f32(cache))  # rewritten by the recompile
    assert hit.cache.state == "hit"
    assert np.array_equal(logits(hit.step, tiny.config), reference)


def _as_format_3(entry: Path, key: str) -> bytes:
    """An entry's blob written as format 3 wrote it: the blob, a JSON trailer with one XXH3-128
    of the whole blob and the same magic footer."""
    import json

    import xxhash

    data = entry.read_bytes()
    trailer_len, _ = entry_format.FOOTER.unpack(data[-entry_format.FOOTER.size :])
    blob = data[: len(data) - entry_format.FOOTER.size - trailer_len]
    trailer = json.dumps(
        {"key": key, "blob_bytes": len(blob), "xxh3_128": xxhash.xxh3_128_hexdigest(blob)}
    )
    return blob + trailer.encode() + entry_format.FOOTER.pack(len(trailer), b"CAHEAD01")


def test_an_entry_of_the_previous_format_is_a_plain_miss(tiny, cache, monkeypatch):
    reference = logits(compile_step(tiny, SPEC, f32(None)).step, tiny.config)
    compile_step(tiny, SPEC, f32(cache))
    (entry,) = entries(cache)
    with monkeypatch.context() as m:  # where format 3 kept this graph
        m.setattr(keys, "FORMAT_VERSION", 3)
        options = f32(cache).for_graph(SPEC.kind)  # as compile_step looks it up
        _, old = cache.lookup(tiny, keys.step_graph_identity(SPEC), options)
    assert old.entry is not None
    old.entry.parent.mkdir(parents=True, exist_ok=True)
    old.entry.write_bytes(_as_format_3(entry, old.entry.name.removesuffix(entry_format.SUFFIX)))
    if old.entry != entry:
        entry.unlink()
    written = old.entry.read_bytes()
    with warnings.catch_warnings():
        warnings.simplefilter("error", store.CompileCacheWarning)  # not an unusable entry
        again = compile_step(tiny, SPEC, f32(cache))
    assert again.cache.state == "miss"
    assert np.array_equal(logits(again.step, tiny.config), reference)
    assert old.entry.read_bytes() == written  # never read as this format's entry


def test_damage_in_any_chunk_of_an_entry_is_found(tiny, cache, monkeypatch):
    """Each chunk of an entry has its own hash, computed on parallel threads: a byte flipped in
    the first, a middle or the last chunk is found, and an undamaged entry hits."""
    import xxhash

    monkeypatch.setattr(entry_format, "CHUNK_BYTES", 4096)  # a tiny entry in many chunks
    reference = logits(compile_step(tiny, SPEC, f32(None)).step, tiny.config)
    compile_step(tiny, SPEC, f32(cache))
    (entry,) = entries(cache)
    good = entry.read_bytes()
    trailer_len, _ = entry_format.FOOTER.unpack(good[-entry_format.FOOTER.size :])
    blob_len = len(good) - entry_format.FOOTER.size - trailer_len
    digests = json.loads(good[blob_len : blob_len + trailer_len])[entry_format.CHECKSUM]
    assert digests == [
        xxhash.xxh3_128_hexdigest(good[i : min(i + 4096, blob_len)])
        for i in range(0, blob_len, 4096)
    ]
    for where in (0, (len(digests) // 2) * 4096 + 7, blob_len - 1):
        damaged = bytearray(good)
        damaged[where] ^= 0x01
        entry.write_bytes(damaged)
        fresh = store.CompileCache(cache.directory)  # a cache warns once per kind of problem
        with pytest.warns(store.CompileCacheWarning, match="checksum"):
            again = compile_step(tiny, SPEC, f32(fresh))
        assert again.cache.state == "miss"
        assert np.array_equal(logits(again.step, tiny.config), reference)
    hit = compile_step(tiny, SPEC, f32(cache))
    assert hit.cache.state == "hit"
    assert np.array_equal(logits(hit.step, tiny.config), reference)


def test_unwritable_cache_compiles_with_a_warning(tiny, tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    with pytest.warns(store.CompileCacheWarning, match="could not write"):
        result = compile_step(tiny, SPEC, f32(store.CompileCache(blocker / "compiled")))
    assert result.cache.state == "miss" and result.compile_s > 0


def test_split_parts_and_cores_hit(tiny, cache):
    cold_parts = WeightParts(tiny, f32(cache))
    cold = compile_attention_core(cold_parts, SPEC, f32(cache))
    assert cold_parts.cache_state == "miss" and cold.cache.state == "miss"
    reference = logits(cold.step, tiny.config)
    warm_parts = WeightParts(tiny, f32(cache))
    warm = compile_attention_core(warm_parts, SPEC, f32(cache))
    assert warm_parts.cache_state == "hit" and warm.cache.state == "hit"
    assert warm_parts.import_s > 0
    assert np.array_equal(logits(warm.step, tiny.config), reference)
    assert len(entries(cache)) == tiny.config.num_layers + 2  # N + 1 parts and one core


def test_a_warm_ladder_run_imports_every_rung(tiny, cache):
    settings = RunConfig(
        SCHEDULES["i2"],
        Ladder.parse("16,32,64"),
        teacher_forced(tiny.config.vocab_size, 8, 50),
        keep_logits=True,
        options=f32(cache),
    )
    cold = run_ladder(tiny, settings)
    stored = {p: p.stat().st_ino for p in entries(cache)}  # a rewrite is a new inode
    assert len(stored) == 3  # one decode graph per rung, the successors compiled one ahead
    stores: list[object] = []
    cache.writes.admit = lambda *a: stores.append(a)  # type: ignore[method-assign]
    warm = run_ladder(tiny, settings)
    assert stores == []  # nothing compiled again
    assert {p: p.stat().st_ino for p in entries(cache)} == stored
    assert warm.predicted == cold.predicted
    assert all(np.array_equal(a, b) for a, b in zip(warm.logits, cold.logits, strict=True))


def test_flags():
    assert cache_options.cache_from_flags(no_cache=True) is None
    default = cache_options.cache_from_flags()
    assert default is not None
    assert default.directory == Path(os.environ["COMPILE_AHEAD_CACHE_DIR"]) / "compiled"
    assert cache_options.cache_from_flags("/x/y").directory == Path("/x/y")


def test_size_cap_drops_the_least_recently_used(tiny, tmp_path):
    probe = store.CompileCache(tmp_path / "probe")
    compile_step(tiny, SPEC, f32(probe))
    (entry,) = entries(probe)
    size = entry.stat().st_size
    capped = store.CompileCache(tmp_path / "capped", max_bytes=int(2.5 * size))
    specs = [GraphSpec(c, 1, "f32") for c in (16, 32, 48)]
    for spec in specs[:2]:
        assert compile_step(tiny, spec, f32(capped)).cache.state == "miss"
    first, second = (compile_step(tiny, s, f32(capped)) for s in specs[:2])
    assert first.cache.state == second.cache.state == "hit"
    os.utime(first.cache.entry, ns=(0, 0))  # make C=16 the least recently used
    assert compile_step(tiny, specs[2], f32(capped)).cache.state == "miss"
    assert len(entries(capped)) == 2
    assert compile_step(tiny, specs[0], f32(capped)).cache.state == "miss"  # it was dropped
    tiny_cap = store.CompileCache(tmp_path / "tiny-cap", max_bytes=size // 2)
    with pytest.warns(store.CompileCacheWarning, match="exceeds the compile cache's cap"):
        result = compile_step(tiny, SPEC, f32(tiny_cap))
    assert result.cache.state == "miss" and "exceed" in (result.cache.note or "")
    assert entries(tiny_cap) == []


def test_concurrent_compiles_of_one_key_leave_one_good_entry(tiny, cache):
    from concurrent.futures import ThreadPoolExecutor

    reference = logits(compile_step(tiny, SPEC, f32(None)).step, tiny.config)
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: compile_step(tiny, SPEC, f32(cache)), range(2)))
    assert {r.cache.state for r in results} <= {"miss", "hit"}
    assert len(entries(cache)) == 1
    assert not list(cache.directory.rglob(".*"))  # no temporary file left
    hit = compile_step(tiny, SPEC, f32(cache))
    assert hit.cache.state == "hit"
    assert np.array_equal(logits(hit.step, tiny.config), reference)


def test_code_identity_covers_every_module_that_shapes_a_graph(tiny, cache, tmp_path, monkeypatch):
    """The cache's code identity is taken from the package itself: editing any module of a
    graph-shaping package (also one no list names, or a new one) misses; the ladder does not."""
    import shutil

    runtime = Path(keys.__file__).resolve().parents[2]
    copy = tmp_path / "runtime"
    shutil.copytree(runtime, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert keys.code_digest(copy) == keys.code_digest(runtime) == keys._code_digest()

    def edited(path: str, text: str = "\n# edited\n") -> str:
        target = copy / path
        original = target.read_text() if target.exists() else None
        with target.open("a") as f:
            f.write(text)
        digest = keys.code_digest(copy)
        if original is None:
            target.unlink()
        else:
            target.write_text(original)
        return digest

    base = keys.code_digest(copy)
    shaping = ["graphs/ir/cut.py", "graphs/ir/attention.py", "model/ir_reader.py"]
    shaping += ["sources/ir_source.py", "compile/settings/options.py", "graphs/new_module.py"]
    shaping += ["compile/cache/keys.py", "compile/graph/step_compile.py", "compile/worker/main.py"]
    for module in shaping:
        assert edited(module) != base, module
    assert edited("ladder/runner.py") == base  # what runs graphs, not what they are

    compile_step(tiny, SPEC, f32(cache))
    assert compile_step(tiny, SPEC, f32(cache)).cache.state == "hit"
    monkeypatch.setattr(keys, "_code_digest", lambda: edited("graphs/ir/cut.py"))
    assert compile_step(tiny, SPEC, f32(cache)).cache.state == "miss"
