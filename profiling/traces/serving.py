"""A serving run as a Perfetto trace: a track per row of the batch (a slice per request while
it holds that row), the active bucket (a slice per stretch on one bucket, an instant per
switch, with the KV bytes moved), and the compiles (a slice each, named by bucket and where it
ran: before serving, on the request path, in the background). Times are the engine's clock
(wall on a device, virtual in the simulator), from the engine's start."""

from __future__ import annotations

from pathlib import Path

from compile_ahead.profiling.perfetto.writer import TraceWriter
from compile_ahead.runtime.serving.engine import ServingEngine

ORIGIN_NS = 1_000_000_000  # the engine's start, one second into the trace


def _ns(seconds: float) -> int:
    return ORIGIN_NS + round(seconds * 1e9)


def write_serving_trace(path: Path, engine: ServingEngine, end_s: float) -> Path:
    """Write ``engine``'s run up to ``end_s`` (its clock) to ``path``; returns where it is."""
    writer = TraceWriter(path, process_name=f"compile-ahead serve ({engine.policy.name})")
    try:
        with writer.batch():
            _rows(writer, engine, end_s)
            _buckets(writer, engine, end_s)
            _compiles(writer, engine)
    except BaseException:
        writer.discard()
        raise
    return writer.close()


def _rows(writer: TraceWriter, engine: ServingEngine, end_s: float) -> None:
    spans = sorted(engine.row_spans, key=lambda s: (s["row"], s["start_s"]))
    for span in spans:
        track = writer.track(f"row {span['row']}")
        live = engine.lives.get(span["request"])
        args = {"request": span["request"]}
        if live is not None:
            args |= {"prompt_tokens": len(live.request.prompt), "tokens": len(live.tokens)}
        end = span["end_s"] if span["end_s"] is not None else end_s
        writer.slice(track, span["request"], _ns(span["start_s"]), _ns(end), args)


def _buckets(writer: TraceWriter, engine: ServingEngine, end_s: float) -> None:
    track = writer.track("active bucket")
    switches = engine.stats.switches
    for i, switch in enumerate(switches):
        start = switch["at_s"]
        end = switches[i + 1]["at_s"] if i + 1 < len(switches) else max(end_s, start)
        b, c = switch["to"]
        args = {
            "from": str(switch["from"]),
            "kv_bytes_moved": switch["bytes"],
            "rows_moved": switch["rows"],
            "move_s": switch["seconds"],
        }
        writer.slice(track, f"[{b}x{c}]", _ns(start), _ns(end), args)


def _compiles(writer: TraceWriter, engine: ServingEngine) -> None:
    # concurrent compiles (one in the background, one on the request path) get tracks apart
    by_where: dict[str, list[dict]] = {}
    for job in engine.stats.compiles:
        by_where.setdefault(job["where"], []).append(job)
    for where, jobs in sorted(by_where.items()):
        track = writer.track(f"compile ({where})")
        for job in sorted(jobs, key=lambda j: j["start_s"]):
            b, c = job["bucket"]
            start = job["start_s"]
            writer.slice(track, f"compile [{b}x{c}]", _ns(start), _ns(start + job["seconds"]))
