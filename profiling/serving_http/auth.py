"""Who may use the endpoint: requests that carry its bearer token (what OpenAI clients send as
their api_key), compared in constant time, and, on a loopback address, only under a loopback
Host name (a page elsewhere that resolves its own name to 127.0.0.1, DNS rebinding, names
another server). Anything else is refused before routing, so a caller without the token learns
nothing about what is served, not even which paths exist.

The token is made at start (``secrets``, 256 bits) and printed, or read from a file only its
owner can read: the project's rule for secrets at rest (a regular file, opened without
following a link, owned by the user who runs the server, no group or other permission bits).
"""

from __future__ import annotations

import errno
import hmac
import json
import os
import secrets
import stat
import string

from starlette.types import ASGIApp, Receive, Scope, Send

from compile_ahead.errors import CompileAheadError
from compile_ahead.output.kind import file_kind

TOKEN_BYTES = 32
TOKEN_FILE_MAX_BYTES = 4096
TOKEN_MIN_CHARS = 16  # a shorter secret is guessable over a loopback connection
# Characters a token may hold: what an HTTP header carries as it is.
TOKEN_CHARS = frozenset(string.ascii_letters + string.digits + "-._~+/=")
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "[::1]"})


def new_token() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


def read_token_file(path: str) -> str:
    """The token held in ``path`` (surrounding whitespace dropped), refused in one line unless
    the file is a regular file of the user running the server that nobody else can read."""
    what = f"--token-file {path}"
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(os.path.expanduser(path), flags)
    except OSError as err:
        if err.errno == errno.ELOOP:  # the name is a symbolic link
            raise CompileAheadError(f"{what}: a symbolic link, which is not followed") from None
        raise CompileAheadError(f"{what}: cannot open it ({err.strerror or err})") from None
    try:
        _check_private(os.fstat(fd), what)
        data = os.read(fd, TOKEN_FILE_MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > TOKEN_FILE_MAX_BYTES:
        raise CompileAheadError(f"{what}: over {TOKEN_FILE_MAX_BYTES} bytes for one token")
    token = data.decode("ascii", errors="replace").strip()
    if len(token) < TOKEN_MIN_CHARS or not set(token) <= TOKEN_CHARS:
        raise CompileAheadError(
            f"{what}: the token must be at least {TOKEN_MIN_CHARS} characters of letters, "
            "digits and -._~+/= (e.g. python -c 'import secrets; print(secrets.token_urlsafe())')"
        )
    return token


def _check_private(st: os.stat_result, what: str) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise CompileAheadError(f"{what}: not a regular file ({file_kind(st.st_mode)})")
    if st.st_uid != os.geteuid():
        raise CompileAheadError(
            f"{what}: owned by uid {st.st_uid}, not by this user ({os.geteuid()})"
        )
    if st.st_mode & 0o077:
        raise CompileAheadError(
            f"{what}: others may read it (mode {stat.S_IMODE(st.st_mode):o}); chmod 600 it"
        )


def host_name(host_header: str) -> str:
    """The name in a Host header, its port left out."""
    host = host_header.strip().lower()
    if host.startswith("["):  # [::1]:8000
        return host[: host.find("]") + 1] if "]" in host else host
    return host.rsplit(":", 1)[0] if ":" in host else host


class Guard:
    """ASGI middleware: the token and, with ``loopback_only``, the Host check, before the app."""

    def __init__(self, app: ASGIApp, token: str, loopback_only: bool) -> None:
        self.app = app
        self._token = token.encode()
        self._loopback_only = loopback_only

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        refusal = self._refusal(headers)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, message, code = refusal
        body = json.dumps(
            {
                "error": {
                    "message": message,
                    "type": "invalid_request_error",
                    "param": None,
                    "code": code,
                }
            }
        ).encode()
        response_headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
        if status == 401:
            response_headers.append((b"www-authenticate", b"Bearer"))
        await send({"type": "http.response.start", "status": status, "headers": response_headers})
        await send({"type": "http.response.body", "body": body})

    def _refusal(self, headers: dict[bytes, bytes]) -> tuple[int, str, str] | None:
        if self._loopback_only:
            host = host_name(headers.get(b"host", b"").decode("latin-1"))
            if host not in LOOPBACK_NAMES:
                return 400, "the Host header does not name this loopback server", "invalid_host"
        given = headers.get(b"authorization")
        if given is None:
            return (
                401,
                "You didn't provide an API key (Authorization: Bearer TOKEN)",
                "missing_api_key",
            )
        scheme, _, credential = given.partition(b" ")
        if scheme.lower() != b"bearer" or not hmac.compare_digest(credential.strip(), self._token):
            return 401, "Incorrect API key provided", "invalid_api_key"
        return None
