"""The endpoint's refusals as OpenAI's API gives them: a status and
``{"error": {"message", "type", "param", "code"}}``, so an OpenAI client raises its own typed
error (BadRequestError, AuthenticationError, ...) with our message."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """A request refused with ``status`` and an OpenAI-style error body."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        code: str | None = None,
        kind: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.kind = kind or _KINDS.get(status, "invalid_request_error")

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        }


# The error types OpenAI's API answers with, by status.
_KINDS = {
    401: "invalid_request_error",
    404: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_exceeded",
    500: "server_error",
    503: "server_error",
}


def bad_request(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)


def unsupported(param: str, what: str) -> ApiError:
    """A parameter this endpoint does not implement, refused rather than ignored."""
    return ApiError(
        400,
        f"{param}: {what} is not supported by this endpoint (greedy decoding, one choice)",
        param=param,
        code="unsupported_parameter",
    )
