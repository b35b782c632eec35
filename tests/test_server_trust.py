"""The local servers (`compare --open`'s page, `trace open`'s trace) under hostile use: a request
without the server's token gets 403 and nothing else, also from another local user; many trace
links share one trace server; idle connections never take more than a bounded number of
threads."""

from __future__ import annotations

import contextlib
import http.client
import os
import shlex
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psutil
import pytest
from cli import command
from compare_fixtures import synthetic_experiment

from compile_ahead.profiling.compare.page_server import PageServer, bind_page
from compile_ahead.profiling.loopback_server import CONNECTION_TIMEOUT_S, MAX_CONNECTIONS
from compile_ahead.profiling.perfetto import ui as trace_open
from compile_ahead.profiling.perfetto.writer import TraceWriter

PAGE = b"<!doctype html><title>the page</title>"


def write_trace(path: Path) -> Path:
    w = TraceWriter(path, "server-trust-test")
    t0 = time.monotonic_ns()
    track = w.device_track("CPU")
    w.slice(track, "decode", t0, t0 + 800_000)
    w.close()
    return path


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    return write_trace(tmp_path / "run.pftrace")


def get(port: int, path: str, method: str = "GET", **headers: str) -> tuple[int, dict, bytes]:
    """One request with this server's Host: status, headers and body."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, headers={"Host": f"127.0.0.1:{port}", **headers})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


@contextlib.contextmanager
def running_page(traces: dict[str, Path]) -> Iterator[PageServer]:
    server = bind_page(PAGE, traces, None, None)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def running_trace(trace: Path) -> Iterator[trace_open.TraceServer]:
    opened = trace_open.open_trace_file(trace)
    server = trace_open.bind(opened, 0, None)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def wrong_tokens(token: str) -> list[str]:
    """Near misses: another token, one character changed, cut short, extended, another case."""
    flipped = token[:-1] + ("A" if token[-1] != "A" else "B")
    return ["0" * len(token), flipped, token[:-1], token + "x", token.swapcase(), ""]


def test_the_page_server_answers_only_with_its_token(trace):
    with running_page({"run.pftrace": trace}) as server:
        port, token = server.server_address[1], server.token
        assert server.server_address[0] == "127.0.0.1"  # loopback only
        assert len(token) >= 22  # at least 128 bits, URL-safe base64
        assert urlsplit(server.url).path == f"/{token}/"
        for path in ("/", "/index.html", "/trace/run.pftrace", "/?token=", f"/?token={token}"):
            assert get(port, path)[::2] == (403, b""), path
        for wrong in wrong_tokens(token):
            for rest in ("/", "/index.html", "/trace/run.pftrace"):
                assert get(port, f"/{wrong}{rest}")[::2] == (403, b""), (wrong, rest)
        status, headers, body = get(port, f"/{token}/")
        assert (status, body) == (200, PAGE)
        assert headers["Referrer-Policy"] == "no-referrer"
        assert get(port, f"/{token}/index.html")[::2] == (200, PAGE)
        status, headers, _ = get(port, f"/{token}")  # relative links need the "/"
        assert (status, headers["Location"]) == (302, f"/{token}/")


def test_the_trace_server_answers_only_with_its_token(trace):
    with running_trace(trace) as server:
        port, token = server.port, server.token
        assert server.server_address[0] == "127.0.0.1"
        assert len(token) >= 22
        assert urlsplit(server.trace_url()).path == f"/{token}/run.pftrace"
        assert server.ui_url().endswith(f"url={server.trace_url()}")
        for method in ("GET", "HEAD", "OPTIONS", "POST"):
            for wrong in ["/run.pftrace", *(f"/{w}/run.pftrace" for w in wrong_tokens(token))]:
                assert get(port, wrong, method)[::2] == (403, b""), (method, wrong)
        time.sleep(0.3)
        assert not server.fetched.is_set(), "a refused request counted as the UI's fetch"
        status, _, body = get(port, f"/{token}/run.pftrace", Origin=trace_open.UI_ORIGIN)
        assert (status, body) == (200, trace.read_bytes())


def listeners() -> set[int]:
    """The ports this process listens on."""
    return {
        c.laddr.port
        for c in psutil.Process().net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN
    }


def test_thirty_trace_links_share_one_trace_server(trace):
    before_threads = threading.active_count()
    with running_page({"run.pftrace": trace}) as server:
        before = listeners()
        port, trace_link = server.server_address[1], urlsplit(server.url).path + "trace/run.pftrace"
        links = {get(port, trace_link)[1]["Location"] for _ in range(30)}
        opened = listeners() - before
        assert len(links) == 1 and len(opened) == 1, (links, opened)
        # the page's server, the one trace server and its closer; no thread per request left
        assert threading.active_count() - before_threads <= 4
        # once the UI has fetched the trace, that server closes and the next link starts one
        (link,) = links
        url = urlsplit(link.split("url=", 1)[1])
        assert url.port in opened
        assert get(url.port, url.path, Origin=trace_open.UI_ORIGIN)[0] == 200
        deadline = time.monotonic() + 30
        while url.port in listeners():
            assert time.monotonic() < deadline, "the fetched trace's server never closed"
            time.sleep(0.1)
        again = get(port, trace_link)[1]["Location"]
        assert again != link
        assert len(listeners() - before) == 1
        url = urlsplit(again.split("url=", 1)[1])  # fetched, so that it closes too
        assert get(url.port, url.path, Origin=trace_open.UI_ORIGIN)[0] == 200


@pytest.mark.parametrize("which", ["page", "trace"])
def test_idle_connections_take_a_bounded_number_of_threads(trace, which):
    before = threading.active_count()
    serving = running_page({}) if which == "page" else running_trace(trace)
    with serving as server:
        port = server.server_address[1]
        idle = [socket.create_connection(("127.0.0.1", port), timeout=60) for _ in range(60)]
        try:
            time.sleep(1.0)
            # the server's own thread, one per served connection, and no more
            assert threading.active_count() - before <= 1 + MAX_CONNECTIONS
            # the idle ones are closed by the server: those past the limit at once, the others
            # once they time out; then a request is answered again
            deadline = time.monotonic() + 2 * CONNECTION_TIMEOUT_S + 30
            for s in idle:
                s.settimeout(max(0.1, deadline - time.monotonic()))
                assert s.recv(1) == b""
        finally:
            for s in idle:
                s.close()
        url = server.url if which == "page" else server.trace_url()
        assert get(port, urlsplit(url).path)[0] == 200


# --- another local user, through the public commands ---------------------------------------


def curl(user, url: str) -> tuple[str, int]:
    """``url`` fetched by ``user`` with curl: the status code and the bytes received."""
    done = user.sh(
        f"curl -s -o /dev/null -w '%{{http_code}} %{{size_download}}' {shlex.quote(url)}"
    )
    code, size = done.stdout.split()
    return code, int(size)


@pytest.fixture
def curl_for_others():
    if not Path("/usr/bin/curl").is_file():
        pytest.skip("curl is not installed in /usr/bin: the other user has no HTTP client")


def server_address(proc: subprocess.Popen, prefix: str) -> str:
    """The first http:// address on the line of stdout that starts with ``prefix``."""
    assert proc.stdout is not None
    while line := proc.stdout.readline():
        if line.startswith(prefix):
            return next(w for w in line.split() if w.startswith("http://"))
    pytest.fail(f"exited {proc.wait(30)} without '{prefix}': {proc.stderr.read()}")


def test_another_user_cannot_read_the_compare_page_or_its_traces(
    tmp_path, other_user, curl_for_others
):
    results = synthetic_experiment(tmp_path / "results")
    write_trace(results / "trial-000.pftrace")
    results.chmod(0o700)
    proc = subprocess.Popen(
        command("compare", results, "--open", "--no-browser"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        page = server_address(proc, "serving the page at ")
        root = f"http://127.0.0.1:{urlsplit(page).port}"
        for path in ("/", "/index.html", "/trace/trial-000.pftrace"):
            assert curl(other_user, root + path) == ("403", 0), path
        # the same user and client with the address the tool printed get the page
        code, size = curl(other_user, page)
        assert code == "200" and size > 1000
    finally:
        proc.terminate()
        proc.communicate(timeout=60)


def test_another_user_cannot_fetch_a_trace_being_opened(tmp_path, trace, other_user,
                                                         curl_for_others):  # fmt: skip
    proc = subprocess.Popen(
        command("trace", "open", trace, "--no-browser"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        url = server_address(proc, "serving ")
        root = f"http://127.0.0.1:{urlsplit(url).port}"
        for path in ("/run.pftrace", "/", "/ui/index.html"):
            assert curl(other_user, root + path) == ("403", 0), path
        assert proc.poll() is None, "a refused request counted as the UI's fetch"
        assert curl(other_user, url) == ("200", trace.stat().st_size)
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
        proc.communicate(timeout=60)


BROWSER = """#!/bin/sh
# Stands in for a browser: note what it was given and the page behind it.
echo "$1" > {out}.argv
page=$(printf '%s' "${{1#file://}}")
stat -c %a "$page" "$(dirname "$page")" > {out}.modes
cat "$page" > {out}.page
"""


def test_the_browser_is_given_no_token_on_its_command_line(tmp_path):
    """`compare --open` opens the page through a private file that redirects to the token's
    address, so the browser's command line (readable by any local user) does not carry it."""
    results = synthetic_experiment(tmp_path / "results")
    out = tmp_path / "browser"
    script = tmp_path / "fake-browser"
    script.write_text(BROWSER.format(out=out))
    script.chmod(0o755)
    proc = subprocess.Popen(
        command("compare", results, "--open"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "BROWSER": str(script)},
    )  # fmt: skip
    try:
        page = server_address(proc, "serving the page at ")
        deadline = time.monotonic() + 60
        while not Path(f"{out}.page").is_file() or not Path(f"{out}.page").read_text():
            assert time.monotonic() < deadline, "the browser was never started"
            time.sleep(0.1)
        argv = Path(f"{out}.argv").read_text().strip()
        token = urlsplit(page).path.strip("/")
        assert argv.startswith("file:///") and token not in argv
        assert Path(f"{out}.modes").read_text().split() == ["600", "700"]
        redirect = Path(f"{out}.page").read_text()
        assert f'content="0;url={page}"' in redirect
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    assert not Path(urlsplit(argv).path).exists()  # removed when the server closed
