"""`compile-ahead serve` without --requests: the serving engine behind an OpenAI-compatible
HTTP endpoint (/v1/completions, /v1/chat/completions, /v1/models, /health, /metrics), a local
server under the project's trust rules (a bearer token, loopback by default, bounded
connections, bodies and waits).

Starlette on uvicorn, with sse-starlette for the streams: Starlette is a small ASGI toolkit
whose responses and middleware we control exactly (every error here is an OpenAI-style body,
where FastAPI's request validation answers 422 in its own shape and adds pydantic models and an
OpenAPI schema nobody here reads); uvicorn bounds connections (limit_concurrency) and stops
gracefully; sse-starlette watches the client while a stream runs, so a client that goes away
cancels its request (Starlette's own StreamingResponse only notices on a failed write).
"""
