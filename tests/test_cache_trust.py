"""The compile cache never hands back a graph compiled from other bytes, and a cache that cannot
be used never breaks a run (issue 21, items 1-7): weights replaced or rewritten while a run is in
flight, rewritten with their mtime put back, an entry damaged anywhere, unremovable entries, a
cache that stores nothing (a file, read-only, full, a cap smaller than an entry), worker faults
on cached rungs, and caps that are not numbers. Each through the public command where the
defect shows, against the same command with --no-cache."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from cache_checks import assert_one_line_warning, other_weights, warning_lines

from compile_ahead.commands.main import main
from compile_ahead.runtime.compile.cache import entry_format, keys, outcome, store
from compile_ahead.runtime.compile.settings.options import CompileOptions
from compile_ahead.runtime.ladder.reporting.events import RunEvents
from compile_ahead.runtime.ladder.runner import run_ladder
from compile_ahead.runtime.ladder.settings.capacities import Ladder
from compile_ahead.runtime.ladder.settings.config import RunConfig
from compile_ahead.runtime.ladder.settings.run_protocol import teacher_forced
from compile_ahead.runtime.ladder.settings.schedules import SCHEDULES
from compile_ahead.runtime.sources.resolve import resolve_model
from conftest import random_qwen2_checkpoint, wait_until_settled

PROTOCOL = ["--inference-precision", "f32", "--prompt-len", "8", "--no-progress"]
RUN = ["run", "--ladder", "tiny", "--schedule", "i2", *PROTOCOL]


# -- models ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def wide_dir(tmp_path_factory) -> Path:
    """A tiny transformer with a wide vocabulary: its compiled rung is ~8 MB, so damage can
    fall between pages a sampled check would read."""
    path = random_qwen2_checkpoint(tmp_path_factory.mktemp("wide"), seed=3, vocab_size=16000)
    wait_until_settled(path)
    return path


def _weights(model_dir: Path) -> Path:
    (path,) = model_dir.glob("*.safetensors")
    return path


def rewrite_in_place(path: Path, data: bytes) -> None:
    """Write ``data`` into the same inode and put size and mtime back (``touch -r``)."""
    st = path.stat()
    with path.open("r+b") as f:
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_mtime_ns == st.st_mtime_ns and path.stat().st_size == st.st_size


@pytest.fixture
def ckpt(tiny_qwen2_dir, tmp_path) -> Path:
    copy = Path(shutil.copytree(tiny_qwen2_dir, tmp_path / "ckpt"))
    wait_until_settled(copy)
    return copy


# -- running --------------------------------------------------------------------------------
def run(tmp_path: Path, name: str, model: Path | str, *extra: str) -> dict:
    out = tmp_path / f"{name}.json"
    assert main([*RUN, "--model", str(model), "--report", str(out), *extra]) == 0
    return json.loads(out.read_text())


def digests(report: dict) -> dict[int, str]:
    return {e["context"]: e["logits_digest"] for e in report["boundary_tokens"]}


def states(report: dict) -> dict[int, str]:
    return {j["capacity"]: j["cache"] for j in report["compile_jobs"] if j["ok"]}


def entries(directory: Path) -> list[Path]:
    return sorted(directory.glob(f"??/*{entry_format.SUFFIX}"))


class SwapAt(RunEvents):
    """Changes the weights file when the compile of ``capacity`` starts: on the compile's own
    thread, before its graph is built, so the swap lands at a known point of the run."""

    def __init__(self, capacity: int, change):
        self.capacity, self.change, self.done = capacity, change, False

    def compile_started(self, job, capacity, kind, background, ts) -> None:
        if capacity == self.capacity and not self.done:
            self.done = True
            self.change()


def library_run(model: Path, cache: store.CompileCache | None, events=None, **settings):
    source = resolve_model(str(model))
    options = CompileOptions("CPU", "f32", cache=cache)
    proto = teacher_forced(source.config.vocab_size, 8, 120)
    run_settings = RunConfig(
        SCHEDULES["i2"], Ladder.parse("tiny"), proto, **settings, options=options
    )
    result = run_ladder(source, run_settings, events)
    assert result.error is None, result.error
    return result


def first_rung_cached_at_most(report, cache_dir: Path) -> dict:
    """The rung compiled before a mid-run change is the only one that may be cached: its
    entry is written after the prompt, so the change may come first and then it is not
    stored either. Returns that rung's compile job."""
    first = next(j for j in report.compile_jobs if j["capacity"] == 16)
    assert len(entries(cache_dir)) == int(bool(first["cache_stored"]))
    return first


# -- 1. weights replaced or rewritten while a run is in flight ----------------------------
def _replacement(ckpt: Path, tmp_path: Path):
    """The checkpoint's weight file, other weights beside it to swap in, a copy of the old
    checkpoint and an uncached run of it: (weights, new, old copy, the old run)."""
    weights = _weights(ckpt)
    new = tmp_path / "new.safetensors"
    new.write_bytes(other_weights(weights))
    old_copy = tmp_path / "old"
    shutil.copytree(ckpt, old_copy)
    wait_until_settled(old_copy)
    return weights, new, old_copy, library_run(old_copy, None)


def test_weights_replaced_during_a_run_never_give_a_stale_hit(ckpt, tmp_path):
    weights, new, old_copy, reference_old = _replacement(ckpt, tmp_path)

    cache = store.CompileCache(tmp_path / "cache")
    swap = SwapAt(32, lambda: os.replace(new, weights))  # `mv new ckpt/` mid-run
    with pytest.warns(store.CompileCacheWarning, match="replaced or removed") as seen:
        in_flight = library_run(ckpt, cache, swap)
    assert swap.done and len(seen) == 1, [str(w.message) for w in seen]
    # The run keeps the weights it mapped: every rung is the old model's. Only the rung
    # compiled before the swap may be cached (its entry is written after the prompt, so the
    # swap may come first: then it is not stored either); the old identity ended with the swap.
    assert in_flight.predicted == reference_old.predicted
    jobs = {j["capacity"]: j for j in in_flight.report.compile_jobs}
    first = first_rung_cached_at_most(in_flight.report, tmp_path / "cache")
    assert first["cache"] == "miss"
    assert first["cache_stored"] or "replaced or removed" in first["cache_note"]
    assert all(jobs[c]["cache"] == "off" for c in (32, 64, 128))
    assert "replaced or removed" in jobs[32]["cache_note"]

    wait_until_settled(ckpt)
    cache_flag = ["--cache-dir", str(tmp_path / "cache")]
    after = run(tmp_path, "after", ckpt, *cache_flag)
    assert set(states(after).values()) == {"miss"}  # the new file is another identity
    control = run(tmp_path, "control", ckpt, "--no-cache")
    assert digests(after) == digests(control)
    again = run(tmp_path, "again", ckpt, *cache_flag)
    assert set(states(again).values()) == {"hit"}
    assert digests(again) == digests(control)
    assert digests(control) != digests(run(tmp_path, "old", old_copy, "--no-cache"))


def test_a_worker_never_compiles_weights_replaced_since_the_run_opened_them(ckpt, tmp_path):
    weights, new, _, reference_old = _replacement(ckpt, tmp_path)

    cache = store.CompileCache(tmp_path / "cache")
    swap = SwapAt(32, lambda: os.replace(new, weights))
    warnings_seen = pytest.warns(store.CompileCacheWarning, match="replaced or removed")
    # The worker resolves the model at its first compile, after the swap: it finds other
    # weights, refuses them, and the rung is compiled here from the mapped ones instead.
    with warnings_seen:
        result = library_run(ckpt, cache, swap, placement="worker")
    boundary = next(b for b in result.report.boundaries if b.to == 32)
    assert boundary.retried and "other weights" in (boundary.compile_error or "")
    assert result.predicted == reference_old.predicted
    first_rung_cached_at_most(result.report, tmp_path / "cache")

    wait_until_settled(ckpt)
    after = run(tmp_path, "after", ckpt, "--cache-dir", str(tmp_path / "cache"))
    assert set(states(after).values()) == {"miss"}
    assert digests(after) == digests(run(tmp_path, "control", ckpt, "--no-cache"))


def test_weights_rewritten_in_place_during_a_run_are_not_stored(ckpt, tmp_path):
    weights = _weights(ckpt)
    new_bytes = other_weights(weights)
    cache = store.CompileCache(tmp_path / "cache")
    # The mapping is shared: the run sees the new bytes from the swap on, under the old key.
    swap = SwapAt(32, lambda: rewrite_in_place(weights, new_bytes))
    with pytest.warns(store.CompileCacheWarning, match="changed on disk") as seen:
        result = library_run(ckpt, cache, swap)
    assert len(seen) == 1  # once, not once per rung
    jobs = {j["capacity"]: j for j in result.report.compile_jobs}
    # Compiled before the rewrite; its entry is written after the prompt, and not at all if
    # the rewrite came first (the export would read the mapping's new bytes).
    first = first_rung_cached_at_most(result.report, tmp_path / "cache")
    assert first["cache"] == "miss"
    assert first["cache_stored"] or "changed on disk" in first["cache_note"]
    for capacity in (32, 64, 128):
        assert jobs[capacity]["cache"] == "off"
        assert "changed on disk" in jobs[capacity]["cache_note"]

    wait_until_settled(ckpt)
    after = run(tmp_path, "after", ckpt, "--cache-dir", str(tmp_path / "cache"))
    assert set(states(after).values()) == {"miss"}  # ctime moved: the rung-16 entry is stale
    assert digests(after) == digests(run(tmp_path, "control", ckpt, "--no-cache"))


def test_an_entry_is_written_only_if_the_weights_are_unchanged_at_that_moment(ckpt, tmp_path):
    """The check before the rename: weights rewritten between the lookup and the store."""
    source = resolve_model(str(ckpt))
    cache = store.CompileCache(tmp_path / "cache")
    from compile_ahead.runtime.compile.graph.step_compile import compile_step
    from compile_ahead.runtime.graphs.spec import GraphSpec

    weights = _weights(ckpt)
    build = source.build_graph

    def build_then_rewrite(spec):
        model = build(spec)
        rewrite_in_place(weights, other_weights(weights))
        return model

    object.__setattr__(source, "build_graph", build_then_rewrite)
    with pytest.warns(store.CompileCacheWarning, match="changed on disk"):
        result = compile_step(
            source, GraphSpec(32, 1, "f32"), CompileOptions("CPU", "f32", cache=cache)
        )
    outcome = result.cache
    assert outcome.state == "miss" and not outcome.stored and "changed on disk" in outcome.note
    assert entries(tmp_path / "cache") == []
    assert list((tmp_path / "cache").rglob(".*")) == []  # no temporary file left


@pytest.fixture
def ir_dir(tmp_path) -> Path:
    """The tiny preset saved as an optimum-style stateful IR (config.json beside it)."""
    import openvino as ov

    from compile_ahead.runtime.graphs.stateful import build_stateful_model

    tiny = resolve_model("tiny")
    out = tmp_path / "ir"
    out.mkdir()
    model = build_stateful_model(tiny.config, tiny.weights)
    ov.save_model(model, str(out / "openvino_model.xml"), compress_to_fp16=False)
    assert tiny.model_dir is not None
    shutil.copy(tiny.model_dir / "config.json", out / "config.json")
    wait_until_settled(out)
    return out


def test_an_ir_rewritten_during_a_run_is_never_compiled_nor_cached(ir_dir, tmp_path):
    bin_file = ir_dir / "openvino_model.bin"
    data = bytearray(bin_file.read_bytes())
    middle = len(data) // 2
    data[middle + 1 : middle + 4097 : 2] = bytes(
        b ^ 0x80 for b in data[middle + 1 : middle + 4097 : 2]
    )
    cache = store.CompileCache(tmp_path / "cache")
    swap = SwapAt(32, lambda: rewrite_in_place(bin_file, bytes(data)))
    source = resolve_model(str(ir_dir))
    proto = teacher_forced(source.config.vocab_size, 8, 120)
    settings = RunConfig(
        SCHEDULES["i2"],
        Ladder.parse("tiny"),
        proto,
        options=CompileOptions("CPU", "f32", cache=cache),
    )
    with pytest.warns(store.CompileCacheWarning, match="changed on disk"):
        result = run_ladder(source, settings, swap)
    # The rung after the change is refused (and its foreground retry): the run stops there.
    assert "the IR changed on disk since this run opened it" in str(result.error)
    first_rung_cached_at_most(result.report, tmp_path / "cache")

    wait_until_settled(ir_dir)
    after = run(tmp_path, "after", ir_dir, "--cache-dir", str(tmp_path / "cache"))
    assert set(states(after).values()) == {"miss"}
    assert digests(after) == digests(run(tmp_path, "control", ir_dir, "--no-cache"))


# -- 2. rewritten in place with size and mtime put back ------------------------------------
def generate(model: Path, *extra: str, capsys) -> dict:
    argv = ["generate", "--model", str(model), "--prompt-ids", "1,2,3,4,5", "--json"]
    assert main([*argv, "--max-new-tokens", "12", "--inference-precision", "f32", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_weights_changed_with_mtime_put_back_miss(ckpt, tmp_path, capsys):
    cache = ["--cache-dir", str(tmp_path / "cache")]
    first = generate(ckpt, *cache, capsys=capsys)
    assert {g["cache"] for g in first["compile_cache"].values()} == {"miss"}
    assert generate(ckpt, *cache, capsys=capsys)["compile_cache"]["decode"]["cache"] == "hit"

    weights = _weights(ckpt)
    rewrite_in_place(weights, other_weights(weights))  # same size, same mtime: `touch -r`
    control = generate(ckpt, "--no-cache", capsys=capsys)  # also lets the change settle
    wait_until_settled(ckpt)
    changed = generate(ckpt, *cache, capsys=capsys)
    assert {g["cache"] for g in changed["compile_cache"].values()} == {"miss"}
    assert (
        changed["sequences"][0]["tokens"]
        == control["sequences"][0]["tokens"]
        != first["sequences"][0]["tokens"]
    )


def negated(path: Path, tensor: str) -> bytes:
    """The safetensors file's bytes with one tensor's signs flipped (any float dtype: the sign
    is the top bit of each little-endian element): same size, other tokens."""
    with path.open("rb") as f:
        (length,) = np.frombuffer(f.read(8), "<u8")
        header = json.loads(f.read(int(length)))
    info = header[tensor]
    itemsize = {"F16": 2, "BF16": 2, "F32": 4}[info["dtype"]]
    begin, end = (8 + int(length) + offset for offset in info["data_offsets"])
    data = bytearray(path.read_bytes())
    data[begin + itemsize - 1 : end : itemsize] = bytes(
        b ^ 0x80 for b in data[begin + itemsize - 1 : end : itemsize]
    )
    return bytes(data)


def test_a_synthetic_checkpoint_changed_in_place_misses(tmp_path, monkeypatch, capsys):
    """Synthetic weights are identified like real ones (the file as opened), not by the preset
    they were drawn for: changed in place with size and mtime kept, they are other weights."""
    monkeypatch.setenv("COMPILE_AHEAD_CACHE_DIR", str(tmp_path / "user-cache"))  # its own copy
    cache = ["--cache-dir", str(tmp_path / "cache")]
    first = generate("tiny", *cache, capsys=capsys)
    assert {g["cache"] for g in first["compile_cache"].values()} == {"miss"}
    assert generate("tiny", *cache, capsys=capsys)["compile_cache"]["decode"]["cache"] == "hit"

    (weights,) = (tmp_path / "user-cache" / "synthetic").glob("*/model.safetensors")
    rewrite_in_place(weights, negated(weights, "model.norm.weight"))
    control = generate("tiny", "--no-cache", capsys=capsys)
    wait_until_settled(weights.parent)
    changed = generate("tiny", *cache, capsys=capsys)
    assert {g["cache"] for g in changed["compile_cache"].values()} == {"miss"}
    assert (
        changed["sequences"][0]["tokens"]
        == control["sequences"][0]["tokens"]
        != first["sequences"][0]["tokens"]
    )


def test_generate_says_hit_miss_or_off_per_graph(ckpt, tmp_path, capsys):
    argv = ["generate", "--model", str(ckpt), "--prompt-ids", "1,2,3", "--max-new-tokens", "4"]
    # A prefill graph beside the decode graph (dynamic: the paged one is never cached).
    argv += ["--prefill-chunk", "2", "--prefill-shape", "dynamic"]
    cache = ["--cache-dir", str(tmp_path / "cache")]
    assert main([*argv, *cache]) == 0
    assert "decode miss, stored; prefill miss, stored" in capsys.readouterr().out
    assert main([*argv, *cache]) == 0
    out = capsys.readouterr().out
    assert "decode hit (import" in out and "prefill hit (import" in out
    assert main([*argv, "--no-cache"]) == 0
    assert "compile cache: decode off; prefill off" in capsys.readouterr().out
    assert main([*argv[:-1], "paged", *cache]) == 0
    assert "decode hit (import" in (out := capsys.readouterr().out), out
    assert "prefill off (not cached: the plugin cannot import" in out, out


# -- 3. an entry damaged between the pages a sampled check reads ---------------------------
def test_an_entry_damaged_anywhere_is_recompiled_with_one_line(wide_dir, tmp_path, capsys):
    cache = ["--cache-dir", str(tmp_path / "cache")]
    ladder = ["--ladder", "16,32"]
    cold = run(tmp_path, "cold", wide_dir, *cache, *ladder)
    capsys.readouterr()
    largest = max(entries(tmp_path / "cache"), key=lambda p: p.stat().st_size)
    size = largest.stat().st_size
    assert size > 4 << 20
    # 3 x 16 KiB between the 64 evenly spaced pages and the first and last MiB.
    with largest.open("r+b") as f:
        for i in (20, 30, 40):
            f.seek(size * i // 64 + 16384)
            f.write(os.urandom(16384))
    warm = run(tmp_path, "warm", wide_dir, *cache, *ladder)
    err = capsys.readouterr().err
    assert_one_line_warning(err, str(largest), "unusable", "checksum")
    assert sorted(states(warm).values()) == ["hit", "miss"]
    assert digests(warm) == digests(cold)
    jobs = [j for j in warm["compile_jobs"] if j["cache"] == "hit"]
    assert all(j["verify_s"] >= 0 for j in jobs)


def test_old_format_entries_are_plain_misses(tmp_path, capsys, monkeypatch):
    cache = ["--cache-dir", str(tmp_path / "cache")]
    monkeypatch.setattr(keys, "FORMAT_VERSION", keys.FORMAT_VERSION - 1)
    run(tmp_path, "old", "tiny", *cache)
    monkeypatch.undo()
    capsys.readouterr()
    report = run(tmp_path, "new", "tiny", *cache)
    assert set(states(report).values()) == {"miss"}
    assert warning_lines(capsys.readouterr().err) == []


# -- 4. a damaged entry that cannot be removed --------------------------------------------
def test_an_entry_that_is_a_directory_warns_once_and_runs_uncached(tmp_path, capsys):
    cache = ["--cache-dir", str(tmp_path / "cache")]
    control = run(tmp_path, "control", "tiny", "--no-cache")
    run(tmp_path, "cold", "tiny", *cache)
    for entry in entries(tmp_path / "cache"):
        entry.unlink()
        (entry / "sub").mkdir(parents=True)  # not removable by unlink, nor by rmdir
    capsys.readouterr()
    report = run(tmp_path, "warm", "tiny", *cache)
    assert_one_line_warning(capsys.readouterr().err, "cannot be removed")
    assert set(states(report).values()) == {"miss"}
    assert not any(j["cache_stored"] for j in report["compile_jobs"])
    assert all(p.is_dir() for p in entries(tmp_path / "cache"))  # left as they were
    assert digests(report) == digests(control)


@contextlib.contextmanager
def mounted_tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip() or 'not root'})")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def remount_read_only(where: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True)


def test_a_damaged_entry_in_a_read_only_cache_warns_once(tmp_path, capsys):
    control = run(tmp_path, "control", "tiny", "--no-cache")
    with mounted_tmpfs(tmp_path / "mnt", "16m") as mnt:
        cache = ["--cache-dir", str(mnt / "cache")]
        run(tmp_path, "cold", "tiny", *cache)
        damaged = entries(mnt / "cache")[0]
        with damaged.open("r+b") as f:
            f.seek(damaged.stat().st_size // 2)
            f.write(b"\0" * 4096)
        remount_read_only(mnt)
        capsys.readouterr()
        report = run(tmp_path, "warm", "tiny", *cache)
        err = capsys.readouterr().err
        assert_one_line_warning(err, str(damaged), "cannot be removed")
        assert sorted(states(report).values()) == ["hit", "hit", "hit", "miss"]
        assert digests(report) == digests(control)
        assert damaged.exists()


# -- 5. nothing stored: the summary and report say so per graph ---------------------------
def test_a_cache_dir_that_is_a_file_runs_uncached_and_says_so(tmp_path, capsys):
    blocker = tmp_path / "blocker"
    blocker.write_text("mine\n")
    report = run(tmp_path, "run", "tiny", "--cache-dir", str(blocker))
    out, err = capsys.readouterr()
    assert_one_line_warning(err, str(blocker), "not a directory")
    assert set(states(report).values()) == {"off"}
    assert "0 imported, 0 compiled and stored, 4 compiled without the cache" in out
    assert "  rung 32: off (the compile cache directory" in out
    assert blocker.read_text() == "mine\n"


def test_a_read_only_cache_says_not_stored_per_graph(tmp_path, capsys):
    with mounted_tmpfs(tmp_path / "mnt", "16m") as mnt:
        remount_read_only(mnt)
        report = run(tmp_path, "run", "tiny", "--cache-dir", str(mnt / "cache"))
        out, err = capsys.readouterr()
    assert_one_line_warning(err, "could not write", "Read-only file system")
    assert "0 imported, 0 compiled and stored, 4 compiled, not stored" in out
    assert "  rung 64: miss, not stored: Read-only file system" in out
    assert all(j["cache_stored"] is False for j in report["compile_jobs"])
    assert all("Read-only" in j["cache_note"] for j in report["compile_jobs"])


def test_a_full_disk_stores_nothing_and_leaves_no_temporary_file(wide_dir, tmp_path, capsys):
    control = run(tmp_path, "control", wide_dir, "--no-cache", "--ladder", "16,32")
    with mounted_tmpfs(tmp_path / "mnt", "2m") as mnt:
        cache = ["--cache-dir", str(mnt / "cache")]
        report = run(tmp_path, "run", wide_dir, *cache, "--ladder", "16,32")
        out, err = capsys.readouterr()
        assert_one_line_warning(err, "could not write", "No space left on device")
        assert "  rung 16: miss, not stored: No space left on device" in out
        assert [p for p in (mnt / "cache").rglob("*") if p.is_file()] == []
    assert digests(report) == digests(control)


def test_a_cap_smaller_than_an_entry_warns_and_stores_nothing(tmp_path, capsys):
    report = run(
        tmp_path, "run", "tiny", "--cache-dir", str(tmp_path / "c"), "--cache-max-gb", "1e-5"
    )
    out, err = capsys.readouterr()
    assert_one_line_warning(err, "exceeds the compile cache's cap", "--cache-max-gb")
    assert "4 compiled, not stored" in out and "rung 16: miss, not stored:" in out
    assert entries(tmp_path / "c") == []
    assert all(j["cache_stored"] is False for j in report["compile_jobs"])


def test_the_cap_is_enforced_on_every_run(tmp_path):
    cache = ["--cache-dir", str(tmp_path / "c")]
    run(tmp_path, "fill", "tiny", *cache)
    sizes = [p.stat().st_size for p in entries(tmp_path / "c")]
    assert len(sizes) == 4
    cap = ["--cache-max-gb", f"{max(sizes) * 1.5 / 1e9:.9f}"]  # room for one entry
    # The last rung stored is the most recently used: kept, and all this run needs. Nothing
    # is stored, yet the cap applies.
    report = run(tmp_path, "capped", "tiny", *cache, "--ladder", "128", "--schedule", "b0", *cap)
    assert set(states(report).values()) == {"hit"}
    assert len(entries(tmp_path / "c")) == 1


# -- 6. worker faults on cached rungs --------------------------------------------------------
def test_a_worker_fault_fires_on_a_cached_rung(tmp_path):
    cache = ["--cache-dir", str(tmp_path / "c")]
    control = run(tmp_path, "fill", "tiny", *cache)
    extra = ["--compile-placement", "worker", "--inject-worker-fault", "32:segfault"]
    report = run(tmp_path, "fault", "tiny", *cache, *extra)
    boundary = next(b for b in report["boundaries"] if b["to"] == 32)
    assert boundary["retried"] and "crashed" in boundary["compile_error"]
    failed = [j for j in report["compile_jobs"] if not j["ok"]]
    assert [j["capacity"] for j in failed] == [32]
    assert states(report)[32] == "hit"  # the foreground retry imports the entry
    assert digests(report) == digests(control)


# -- 7. caps that are not numbers -----------------------------------------------------------
@pytest.mark.parametrize("command", ["run", "generate"])
@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_a_cap_that_is_not_a_finite_size_is_one_line(command, value, tmp_path, capsys):
    argv = [command, "--model", "tiny", "--cache-max-gb", value, "--cache-dir", str(tmp_path)]
    argv += ["--prompt-ids", "1,2"] if command == "generate" else ["--no-progress"]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert err.splitlines() == [
        "compile-ahead: error: --cache-max-gb must be a finite number of GB >= 0 (0: no cap), "
        f"got {float(value)}"
    ]
    assert out == "" and list(tmp_path.iterdir()) == []


def test_a_runs_end_waits_for_the_entry_being_written_and_writes_none_after(tmp_path):
    """A compile a run abandoned may still finish on its thread; the run's end (end_writes)
    waits for an entry being written and refuses later ones, so a process that exits then
    never leaves a half-written file; the next run writes again (begin_writes)."""
    import threading

    cache = store.CompileCache(tmp_path / "cache")
    writing, release = threading.Event(), threading.Event()

    def held() -> None:  # asked inside the write, just before the rename
        writing.set()
        release.wait(30)

    def miss(name: str, unsettled=None) -> outcome.CacheOutcome:
        entry = tmp_path / "cache" / f"{name}{entry_format.SUFFIX}"
        return outcome.CacheOutcome("miss", entry=entry, unsettled=unsettled)

    first: list[outcome.CacheOutcome] = []
    writer = threading.Thread(target=lambda: first.append(cache.store_blob(miss("a", held), b"x")))
    writer.start()
    assert writing.wait(30)
    ended = threading.Thread(target=cache.end_writes)
    ended.start()
    ended.join(0.3)
    assert ended.is_alive()  # waits for the write in progress
    release.set()
    ended.join(30)
    writer.join(30)
    assert not ended.is_alive() and first[0].stored
    late = cache.store_blob(miss("b"), b"y")
    assert not late.stored and late.note == "not stored: the run had ended"
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [f"a{entry_format.SUFFIX}"]
    cache.begin_writes()
    assert cache.store_blob(miss("c"), b"z").stored
