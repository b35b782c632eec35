"""One-ahead compiles in a worker process, wired through the runner: the same tokens and logits
as in-process, failures retried in the foreground and recorded on the boundary, the worker's
phases on the trace, and no worker left behind."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from compile_ahead.commands.main import main
from compile_ahead.profiling.perfetto.validate import validate_trace
from compile_ahead.runtime.compile.settings.device_defaults import default_placement
from conftest import start_decoding_run

RUN = ["run", "--model", "tiny", "--ladder", "tiny", "--schedule", "i2", "--no-progress"]
RUN += ["--inference-precision", "f32", "--prompt-len", "8", "--no-cache"]  # compile for real


def _report(tmp_path: Path, name: str, *extra: str) -> dict:
    out = tmp_path / f"{name}.json"
    assert main([*RUN, "--report", str(out), *extra]) == 0
    return json.loads(out.read_text())


def _digests(report: dict) -> dict[int, str]:
    return {e["context"]: e["logits_digest"] for e in report["boundary_tokens"]}


def test_a_run_on_cpu_compiles_ahead_in_process_unless_told(tmp_path, monkeypatch):
    """Without --compile-placement a CPU run starts no compile worker (the measured CPU
    default); with --compile-placement worker the same run does."""
    from compile_ahead.runtime.compile.worker import client as worker_client

    started: list[str] = []

    class NoWorker:
        def __init__(self, *args, **kwargs):
            started.append("worker")
            raise RuntimeError("no worker in this test")

    monkeypatch.setattr(worker_client, "CompileWorker", NoWorker)
    report = _report(tmp_path, "default")
    assert default_placement("CPU") == report["placement"] == "in-process"
    assert not started and all(b.get("compile_error") is None for b in report["boundaries"])
    told = _report(tmp_path, "worker", "--compile-placement", "worker")
    assert told["placement"] == "worker" and started
    # the failed worker compile was retried in the foreground and recorded
    assert all("no worker in this test" in b.get("compile_error", "") for b in told["boundaries"])


def test_worker_compiled_rungs_give_the_same_logits(tmp_path):
    here = _report(tmp_path, "here")
    worker = _report(tmp_path, "worker", "--compile-placement", "worker")
    assert worker["tokens_decoded"] == here["tokens_decoded"] == 120
    assert len(worker["boundaries"]) == 3 and not any(
        b.get("retried") for b in worker["boundaries"]
    )
    assert _digests(worker) == _digests(here)


@pytest.mark.parametrize("kind", ["segfault", "hang", "raise"])
def test_a_failing_worker_is_retried_in_the_foreground_and_recorded(kind, tmp_path):
    extra = ["--compile-placement", "worker", "--inject-worker-fault", f"32:{kind}"]
    report = _report(tmp_path, kind, *extra, "--compile-timeout", "3")
    boundary = next(b for b in report["boundaries"] if b["to"] == 32)
    assert boundary["retried"] and not boundary["ready"]
    word = {"segfault": "crashed", "hang": "hung", "raise": "failed"}[kind]
    assert word in boundary["compile_error"]
    assert report["stop_reason"] == "completed" and report["tokens_decoded"] == 120


def test_the_trace_shows_the_workers_compile_phases(tmp_path):
    trace = tmp_path / "t.pftrace"
    assert main([*RUN, "--compile-placement", "worker", "--trace", str(trace)]) == 0
    assert validate_trace(trace).ok
    data = trace.read_bytes()
    assert b"import_model" in data and b"Compile model" in data


def _children(pid: int) -> list[int]:
    kids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                kids.append(int(entry.name))
    return kids


def test_sigterm_during_a_worker_compile_leaves_no_worker(tmp_path):
    report = tmp_path / "r.json"
    argv = [a for a in RUN if a != "--no-progress"]  # progress lines say decoding has begun
    argv += ["--compile-placement", "worker", "--inject-worker-fault", "32:hang"]
    argv += ["--step-delay", "0.05", "--report", str(report)]
    proc = start_decoding_run(argv)
    workers: list[int] = []
    deadline = time.monotonic() + 60
    while not workers and time.monotonic() < deadline:  # the hung successor's worker
        workers = _children(proc.pid)
        time.sleep(0.1)
    assert workers, "no compile worker was started"
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == 130
    failed = tmp_path / "r.failed.json"  # an interrupted run's report, beside the requested
    assert json.loads(failed.read_text())["stop_reason"] == "interrupted"
    for pid in workers:  # every worker the run started is gone (or a zombie being reaped)
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        assert state == "Z", f"worker {pid} outlived its run"
