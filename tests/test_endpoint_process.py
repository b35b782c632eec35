"""`compile-ahead serve` (listening) as a process, over tests/fake_engine.py's engine
(tests/fake_serve.py): Ctrl-C and SIGTERM under load end it with 130 in bounded time, streams
cut by the shutdown say so, requests that fit the drain finish, a second signal cancels at
once; a bad token file or a port in use is one line; another local user gets 401 and cannot
read the token file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import openai
import pytest

FAKE_SERVE = Path(__file__).parent / "fake_serve.py"
MODEL = "tiny"
CRASH_MARKS = ("Traceback", "terminate called", "Fatal Python error", "Segmentation fault")


class Server:
    def __init__(self, *args: str, step_s: float = 0.02, token_file: Path | None = None):
        env = dict(os.environ, FAKE_STEP_S=str(step_s))
        extra = ["--token-file", str(token_file)] if token_file else []
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(FAKE_SERVE),
                "--model",
                MODEL,
                "--ladder",
                "256",
                "--buckets",
                "1,2,4,8",
                "--port",
                "0",
                *extra,
                *args,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self._read_address()

    @classmethod
    def of(cls, proc: subprocess.Popen) -> Server:
        """A `compile-ahead serve` process started elsewhere, once it says where it listens."""
        server = cls.__new__(cls)
        server.proc = proc
        server._read_address()
        return server

    def _read_address(self) -> None:
        self.url = self.key = None
        deadline = time.monotonic() + 120
        for line in self.proc.stdout:  # until it says where it listens
            if line.startswith("serving "):
                self.url = line.split(" at ")[1].strip()
            if line.startswith("api key: "):
                self.key = line.split(": ", 1)[1].strip()
                break
            assert time.monotonic() < deadline
        assert self.url and self.key, self.proc.stderr.read()

    def client(self, key: str | None = None) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url, api_key=key or self.key, max_retries=0, timeout=60)

    def end(self, timeout: float) -> tuple[int, str]:
        try:
            _, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError("the server did not exit in time") from None
        return self.proc.returncode, err


def _streams(server: Server, n: int, max_tokens: int) -> tuple[list, list[threading.Thread], dict]:
    """``n`` streaming clients; returns their outcomes (filled as they end), threads, and a
    count of chunks received per client."""
    outcomes: list = [None] * n
    got = {i: 0 for i in range(n)}
    client = server.client()

    def one(i: int) -> None:
        try:
            reason = None
            for chunk in client.completions.create(
                model=MODEL, prompt=[i + 1, 2], max_tokens=max_tokens, stream=True
            ):
                got[i] += 1
                reason = chunk.choices[0].finish_reason or reason
            outcomes[i] = ("done", reason)
        except openai.APIError as err:
            outcomes[i] = ("error", str(err))

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while not all(got.values()):
        assert time.monotonic() < deadline, "the streams did not start"
        time.sleep(0.01)
    return outcomes, threads, got


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_under_load_cancels_after_the_drain_and_exits_130(sig):
    server = Server("--drain-timeout", "1")
    outcomes, threads, _ = _streams(server, 8, max_tokens=250)  # 5 s each at 20 ms a token
    started = time.monotonic()
    server.proc.send_signal(sig)
    code, err = server.end(timeout=30)
    assert code == 130
    assert time.monotonic() - started < 10  # the drain (1 s) and a margin, not the requests
    assert "interrupted" in err and not any(mark in err for mark in CRASH_MARKS), err
    for t in threads:
        t.join(10)
    assert all(o is not None and o[0] == "error" for o in outcomes), outcomes
    assert all("shutting down" in o[1] or "Connection" in o[1] for o in outcomes), outcomes


def test_requests_that_fit_the_drain_finish_and_new_ones_are_refused():
    server = Server("--drain-timeout", "20")
    outcomes, threads, _ = _streams(server, 4, max_tokens=40)  # under 1 s each
    server.proc.send_signal(signal.SIGTERM)
    for t in threads:
        t.join(30)
    assert outcomes == [("done", "length")] * 4
    code, err = server.end(timeout=30)
    assert code == 130, err
    with pytest.raises(httpx.ConnectError):
        httpx.get(server.url + "/models")


def test_a_second_signal_cancels_at_once():
    server = Server("--drain-timeout", "120")
    outcomes, threads, _ = _streams(server, 4, max_tokens=250)
    server.proc.send_signal(signal.SIGINT)
    time.sleep(0.5)
    started = time.monotonic()
    server.proc.send_signal(signal.SIGINT)
    code, err = server.end(timeout=30)
    assert code == 130 and time.monotonic() - started < 10, err
    assert not any(mark in err for mark in CRASH_MARKS), err
    for t in threads:
        t.join(10)
    assert all(o is not None and o[0] == "error" for o in outcomes), outcomes


def _serve_fails(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(FAKE_SERVE), "--model", MODEL, "--ladder", "256", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_token_file_others_may_read_is_one_line(tmp_path):
    token = tmp_path / "token"
    token.write_text("a-long-enough-token-0123456789\n")
    token.chmod(0o644)
    done = _serve_fails("--port", "0", "--token-file", str(token))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"compile-ahead: error: --token-file {token}: others may read it (mode 644); chmod 600 it"
    ]


def test_a_port_in_use_is_one_line():
    import socket

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    try:
        done = _serve_fails("--port", str(port))
    finally:
        taken.close()
    assert done.returncode == 2
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .startswith(f"compile-ahead: error: cannot listen on 127.0.0.1:{port}")
    )
    assert "Traceback" not in done.stderr


def test_another_local_user_gets_401_and_cannot_read_the_token(other_user, reachable_tmp):
    token_file = reachable_tmp / "token"
    fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, b"the-owners-token-0123456789abcdef\n")
    os.close(fd)
    server = Server(token_file=token_file)
    try:
        url = server.url + "/models"
        for auth in ("", "-H 'Authorization: Bearer guess-0123456789abcdefgh'"):
            done = other_user.sh(f"curl -s -o /dev/null -w '%{{http_code}}' {auth} {url}")
            assert done.stdout == "401"
        done = other_user.sh(f"cat {token_file}", check=False)
        assert done.returncode != 0 and "Permission denied" in done.stderr
        # The owner's client, with the token from the file, is served.
        models = server.client("the-owners-token-0123456789abcdef").models.list()
        assert [m.id for m in models] == [MODEL]
    finally:
        server.proc.send_signal(signal.SIGINT)
        code, err = server.end(timeout=30)
    assert code == 130, err


def test_ctrl_c_under_load_on_the_real_engine_leaves_no_process():
    """`compile-ahead serve` itself (its engine compiling and decoding the tiny preset): Ctrl-C
    with 8 streams running ends it with 130 within the drain, and nothing it started lives on."""
    import psutil
    from cli import command

    proc = subprocess.Popen(
        command(
            "serve",
            "--model",
            "tiny",
            "--ladder",
            "2048",
            "--buckets",
            "1,2,4,8",
            "--policy",
            "up-front",
            "--inference-precision",
            "f32",
            "--port",
            "0",
            "--drain-timeout",
            "1",
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    server = Server.of(proc)
    outcomes, threads, _ = _streams(server, 8, max_tokens=2000)
    started_by_it = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(signal.SIGINT)
    code, err = server.end(timeout=60)
    assert code == 130
    assert "interrupted" in err and not any(mark in err for mark in CRASH_MARKS), err
    for t in threads:
        t.join(10)
    assert all(o is not None and o[0] == "error" for o in outcomes), outcomes  # cut, told why
    assert not [p for p in started_by_it if p.is_running() and p.status() != "zombie"]


@pytest.mark.skipif(
    __import__("trace_processor").unavailable_reason() is not None, reason="no trace processor"
)
def test_a_listening_server_writes_its_trace_when_it_stops(tmp_path):
    """`serve --trace` while listening: on Ctrl-C the trace of the requests it served is
    written, read back by Perfetto's trace processor (a row track slice per request)."""
    from cli import command
    from trace_processor import NodeTraceProcessor

    trace = tmp_path / "listen.pftrace"
    proc = subprocess.Popen(
        command(
            *("serve", "--model", "tiny", "--ladder", "64", "--buckets", "1,2"),
            *("--policy", "up-front", "--port", "0", "--trace", str(trace)),
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    server = Server.of(proc)
    client = server.client()
    ids = [client.completions.create(model="tiny", prompt=[i + 1, 5], max_tokens=4).id
           for i in range(3)]  # fmt: skip
    proc.send_signal(signal.SIGINT)
    code, err = server.end(timeout=60)
    assert code == 130, err
    with NodeTraceProcessor.open(trace) as tp:
        rows = tp.rows(
            "select t.name as track, s.name as name from slice s join track t on s.track_id = t.id"
        )
    on_rows = [r["name"] for r in rows if r["track"].startswith("row ")]
    assert len(on_rows) == 3, rows
    assert any(r["track"] == "active bucket" for r in rows)
    assert len(set(ids)) == 3
