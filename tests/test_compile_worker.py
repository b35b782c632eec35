"""Compile placement in a worker process: same logits as in-process, failures become failed
compiles, no worker outlives its parent, and the worker's compile phases come back."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import openvino as ov
import pytest

from compile_ahead.profiling.perfetto.validate import validate_trace
from compile_ahead.profiling.perfetto.writer import TraceWriter
from compile_ahead.profiling.traces.worker_phases import write_worker_phases
from compile_ahead.runtime.compile.graph.step_compile import compile_step
from compile_ahead.runtime.compile.settings.options import CompileOptions
from compile_ahead.runtime.compile.worker.client import CompileWorker, WorkerCompileError
from compile_ahead.runtime.compile.worker.protocol import WORKER_DOMAIN
from compile_ahead.runtime.graphs.spec import GraphSpec, past_key_name, past_value_name
from compile_ahead.runtime.sources.base import ReopenSpec
from compile_ahead.runtime.sources.resolve import reopen

MODEL = ReopenSpec("tiny")
OPTIONS = CompileOptions("CPU", "f32", "f32")
SPEC = GraphSpec(32, 1, "f32")
SCHED_IDLE = 5


@pytest.fixture(scope="module")
def placement():
    with CompileWorker() as p:
        yield p


def _proc_stat(pid: int, tid: int | None = None) -> list[str] | None:
    """Fields of /proc/PID[/task/TID]/stat after the command name (field 3 on), or None."""
    path = f"/proc/{pid}/task/{tid}/stat" if tid else f"/proc/{pid}/stat"
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def _gone(pid: int) -> bool:
    """Not running: no such process, or a zombie someone else has to reap."""
    fields = _proc_stat(pid)
    return fields is None or fields[0] == "Z"


def _wait_gone(pid: int, within_s: float = 60.0) -> bool:
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        if _gone(pid):
            return True
        time.sleep(0.05)
    return False


def _our_workers() -> list[int]:
    """Live processes whose parent is this one and that run the worker entry point."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _proc_stat(int(entry.name))
        if fields is None or fields[0] == "Z" or int(fields[1]) != os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"compile.worker.main" in cmdline:
            found.append(int(entry.name))
    return found


def _decode(step, kv: list[np.ndarray], tokens: list[int]) -> list[np.ndarray]:
    """Logits of a few steps at growing past lengths over the same KV contents."""
    for i in range(step.num_layers):
        step.request.set_tensor(past_key_name(i), ov.Tensor(kv[2 * i], shared_memory=True))
        step.request.set_tensor(past_value_name(i), ov.Tensor(kv[2 * i + 1], shared_memory=True))
    return [step.run(np.array([t], np.int64), past).logits.copy() for past, t in enumerate(tokens)]


def test_worker_rung_gives_identical_logits(placement):
    source = reopen(MODEL)
    cfg = source.config
    rng = np.random.default_rng(0)
    shape = (1, cfg.num_kv_heads, SPEC.capacity, cfg.head_dim)
    kv = [rng.standard_normal(shape).astype(np.float32) for _ in range(2 * cfg.num_layers)]
    tokens = [3, 17, 256, 999, 0, 42]
    local = compile_step(source, SPEC, OPTIONS).step
    blobs: list[bytes] = []
    result = placement.compile(MODEL, SPEC, OPTIONS, timeout_s=120, blob_sink=blobs.append)
    assert [len(b) for b in blobs] == [result.blob_bytes]  # e.g. for the compile cache
    step = source.make_step(result.compiled, SPEC)
    assert type(step) is type(local)
    assert step.num_layers == cfg.num_layers and step.spec == SPEC
    ours, theirs = _decode(local, kv, tokens), _decode(step, kv, tokens)
    for a, b in zip(ours, theirs, strict=True):
        assert np.array_equal(a, b)
    assert result.worker_pid != os.getpid() and result.blob_bytes > 0
    assert result.model_config == cfg  # the worker resolved the same model


def test_worker_runs_every_thread_at_idle_priority(placement):
    result = placement.compile(MODEL, SPEC, OPTIONS, timeout_s=120)
    tids = [int(t) for t in os.listdir(f"/proc/{result.worker_pid}/task")]
    assert len(tids) > 1  # OpenVINO's and TBB's threads, not only the main one
    for tid in tids:
        fields = _proc_stat(result.worker_pid, tid)
        assert fields is not None
        # stat fields 19 (nice) and 41 (policy), counted from 1; fields here start at 3
        assert (int(fields[16]), int(fields[38])) == (19, SCHED_IDLE), tid


def test_worker_phases_reach_the_trace(placement, tmp_path):
    result = placement.compile(MODEL, SPEC, OPTIONS, timeout_s=120)
    names = {(p.domain, p.name) for p in result.phases}
    assert ("ov::phases", "Compile model") in names  # the worker's own ITT collector saw it
    assert {(WORKER_DOMAIN, "build graph"), (WORKER_DOMAIN, "compile_model")} <= names
    assert ("compile_ahead", "import_model") in names
    # One clock for both processes: every phase lies inside the call that asked for it.
    for p in result.phases:
        assert result.begin_ns <= p.begin_ns <= p.end_ns <= result.end_ns, p
    worker_side = [p for p in result.phases if p.name != "import_model"]
    assert {p.pid for p in worker_side} == {result.worker_pid}

    trace = tmp_path / "worker.pftrace"
    writer = TraceWriter(trace)
    job = writer.compile_job_track("decode C=32 (worker)")
    writer.slice(job, "compile decode C=32", result.begin_ns, result.end_ns)
    written = write_worker_phases(writer, job, result.phases, result.begin_ns, result.end_ns)
    writer.close()
    assert written == len(result.phases)
    report = validate_trace(trace)
    assert report.ok, report.summary()
    assert report.slices == 1 + written


def test_worker_error_is_a_failed_compile_and_the_worker_stays(placement):
    pid = placement.start()
    with pytest.raises(WorkerCompileError, match="injected compile failure in the worker") as err:
        placement.compile(MODEL, SPEC, OPTIONS, timeout_s=120, fault="raise")
    assert err.value.kind == "error"
    assert placement.pids == [pid]


@pytest.mark.parametrize(("fault", "signame"), [("abort", "SIGABRT"), ("segfault", "SIGSEGV")])
def test_crashing_worker_is_a_failed_compile(placement, fault, signame):
    pid = placement.start()
    with pytest.raises(WorkerCompileError, match=rf"crashed .* killed by {signame}") as err:
        placement.compile(MODEL, SPEC, OPTIONS, timeout_s=120, fault=fault)
    assert err.value.kind == "crashed"
    assert _gone(pid) and placement.pids == []
    # The next compile gets a fresh worker, as a foreground retry would.
    assert placement.compile(MODEL, SPEC, OPTIONS, timeout_s=120).worker_pid != pid


def test_hung_worker_is_killed_at_the_deadline(placement):
    pid = placement.start()
    with pytest.raises(WorkerCompileError, match=r"hung .* killed after the 2 s deadline") as err:
        placement.compile(MODEL, SPEC, OPTIONS, timeout_s=2, fault="hang")
    assert err.value.kind == "timeout"
    assert _gone(pid) and placement.pids == []
    assert not _our_workers() or _our_workers() == placement.pids


def test_shutdown_leaves_no_worker_and_no_files(tmp_path):
    placement = CompileWorker(tmp_dir=tmp_path)
    placement.compile(MODEL, SPEC, OPTIONS, timeout_s=120)
    (pid,) = placement.pids
    assert not list(tmp_path.iterdir())  # the blob and the log are unnamed files
    placement.shutdown()
    assert _gone(pid)
    with pytest.raises(ChildProcessError):  # reaped already, not left as a zombie
        os.waitpid(pid, os.WNOHANG)
    with pytest.raises(WorkerCompileError, match="shut down"):
        placement.compile(MODEL, SPEC, OPTIONS, timeout_s=120)


def test_one_worker_per_compile_ends_with_it():
    with CompileWorker(persistent=False) as placement:
        result = placement.compile(MODEL, SPEC, OPTIONS, timeout_s=120)
        assert placement.pids == [] and _gone(result.worker_pid)


_CHILD = textwrap.dedent(
    """
    import sys, time
    import compile_ahead
    from compile_ahead.runtime.graphs.spec import GraphSpec
    from compile_ahead.runtime.compile.worker.client import CompileWorker
    from compile_ahead.runtime.compile.settings.options import CompileOptions
    from compile_ahead.runtime.sources.base import ReopenSpec

    placement = CompileWorker(tmp_dir=sys.argv[2])
    print(placement.start(), flush=True)
    if sys.argv[1] == "hang":
        print("compiling", flush=True)
        placement.compile(ReopenSpec("tiny"), GraphSpec(32, 1, "f32"),
                          CompileOptions("CPU", "f32", "f32"), timeout_s=600, fault="hang")
    else:
        time.sleep(600)
    """
)


def _child(mode: str, tmp: Path) -> tuple[subprocess.Popen[str], int]:
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, mode, str(tmp)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    worker = int(child.stdout.readline())
    return child, worker


def test_ctrl_c_during_a_compile_leaves_no_worker(tmp_path):
    child, worker = _child("hang", tmp_path)
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "compiling"
    time.sleep(0.5)  # let the request reach the worker (the outcome is the same either way)
    child.send_signal(signal.SIGINT)
    _, stderr = child.communicate(timeout=60)
    assert "KeyboardInterrupt" in stderr
    assert child.returncode != 0
    assert _gone(worker)
    assert not list(tmp_path.iterdir())


def test_worker_dies_with_a_killed_parent(tmp_path):
    child, worker = _child("sleep", tmp_path)
    child.kill()  # SIGKILL: no cleanup runs in the parent; PR_SET_PDEATHSIG must do it
    child.wait(timeout=60)
    assert _wait_gone(worker)
    assert not list(tmp_path.iterdir())  # nothing named was ever left to clean up


def test_shutdown_during_a_compile_fails_it_and_kills_the_worker():
    placement = CompileWorker()
    pid = placement.start()
    outcome: list[BaseException] = []

    def compile_hanging() -> None:
        try:
            placement.compile(MODEL, SPEC, OPTIONS, timeout_s=600, fault="hang")
        except BaseException as err:
            outcome.append(err)

    thread = threading.Thread(target=compile_hanging)
    thread.start()
    time.sleep(0.5)  # the compile is under way (were it not yet, it fails the same way)
    placement.shutdown()
    thread.join(timeout=60)
    assert not thread.is_alive()
    (err,) = outcome
    assert isinstance(err, WorkerCompileError) and err.kind == "shutdown"
    assert _gone(pid) and not _our_workers()
