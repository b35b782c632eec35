"""The numbers of a trial record, checked where a record is read (a trial log's line, a
campaign store's row): a record holding a number that is not finite (NaN, Infinity, 1e999 or
an integer past the float range), or something else than a number where a measure is
(``"compile_s": "abc"``, ``"step_s_mean": [1]``), is not a valid trial. Such a trial is left
out of every statistic, and the reader names it (file and line, or store row).

A measure is known two ways: by its key's unit suffix (``MEASURE_SUFFIXES``: a number, null, or
lists and objects of them), and by its place in a result (``SCALAR_MEASURES``: one number or
null, whatever its key is named). The second list holds every field an endpoint reads, so
no value an endpoint would read can be dropped without a word (tests/test_trial_numbers.py
checks it against every kind's endpoints).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping

# A key ending so names a measure: its value is a number, null, or lists and objects of them.
MEASURE_SUFFIXES = ("_s", "_ns", "_us", "_ms", "_bytes", "_pct")
ANY_ITEM = "*"  # in a SCALAR_MEASURES path: every item of a list, every value of an object

# Where a trial's result holds one measured number (or null), whatever its key's name: the run
# report's (an `ab schedule` trial's result, batch fields included) and a compile trial's.
_RUN_REPORT = (
    "foreground_compile_s", "first_rung_compile_s", "weights_compile_s", "prefill_compile_s",
    "background_compile_s", "prefill_s", "decode_s", "critical_path_s", "first_token_s",
    "startup_s", "first_token_compile_s", "decode_graph_wait_s", "cache_store_wait_s",
    "kv_reserved_avg_bytes", "kv_reserved_peak_bytes", "kv_committed_avg_bytes",
    "kv_committed_peak_bytes", "graphs_resident_max", "weight_copies_resident_max",
    "compiles_in_flight_max", "peak_rss_bytes", "tokens_decoded", "context_final",
    "batch_steps", "step_s_mean", "step_s_median", "tokens_generated", "tokens_per_s",
    "kv_reserved_avg_bytes_per_sequence", "kv_reserved_peak_bytes_per_sequence",
    "kv_committed_avg_bytes_per_sequence", "kv_committed_peak_bytes_per_sequence",
)  # fmt: skip
_RUNG = ("capacity", "tokens", "decode_s", "tok_s", "compile_s", "read_s")
_BOUNDARY = ("from", "to", "compile_s", "decode_left_s", "ready_margin_s", "wait_s",
             "migration_s", "bytes_copied")  # fmt: skip
_COMPILE = ("wall_s", "cpu_s", "instructions", "cycles", "peak_rss_bytes", "transformations_s")
_COMPILE_TRIAL = ("import_s", "total_compile_s", "total_read_s", "total_transformations_s",
                  "max_rss_bytes", "trial_wall_s")  # fmt: skip
_PER_PASS = ("pass_self_s", ANY_ITEM, ANY_ITEM)  # manager -> pass -> seconds
# A serving report's (an `ab serve` trial's result): the engine's, the requests' distributions
# and rates, and each request's arrival and TTFT.
_SERVE_METRICS = (
    *(("requests_metrics", d, q) for d in ("ttft_s", "tpot_s", "itl_s", "e2e_s")
      for q in ("mean", "p50", "p90", "p99")),
    *(("requests_metrics", k) for k in ("goodput_per_s", "output_tokens_per_s",
                                        "request_throughput_per_s", "span_s")),
    *(("engine", k) for k in ("time_to_ready_s", "first_bucket_ready_s", "peak_rss_bytes")),
    *(("engine", "compile_s", k) for k in ("request_path", "background", "before_serving",
                                           "waited_for_background")),
    *(("requests", ANY_ITEM, k) for k in ("arrival_s", "ttft_s", "e2e_s")),
)  # fmt: skip
SCALAR_MEASURES: tuple[tuple[str, ...], ...] = (
    *((key,) for key in (*_RUN_REPORT, *_COMPILE_TRIAL)),
    *(("rungs", ANY_ITEM, key) for key in _RUNG),
    ("rungs", ANY_ITEM, "extension_counters", "itt_compile_model_s"),
    *(("rungs", ANY_ITEM, "compiles", ANY_ITEM, key) for key in _COMPILE),
    ("rungs", ANY_ITEM, "compiles", ANY_ITEM, "extension_counters", "itt_compile_model_s"),
    ("rungs", ANY_ITEM, "compiles", ANY_ITEM, *_PER_PASS),
    _PER_PASS,
    *(("boundaries", ANY_ITEM, key) for key in _BOUNDARY),
    *_SERVE_METRICS,
)
# The record's own measures (the trial's result is checked as above).
RECORD_NUMBERS = ("wall_s", "started_unix")


def _is_measure(key: object) -> bool:
    return isinstance(key, str) and key.endswith(MEASURE_SUFFIXES)


def _bad_number(value: object) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, int):
        try:
            float(value)
        except OverflowError:
            return True
    return False


def _problem(node: object, where: str, measure: bool) -> str | None:
    """Where below ``node`` a number is not finite, or a measure is not a number."""
    if _bad_number(node):
        return f"{where} is not a finite number ({str(node)[:20]})"
    if isinstance(node, Mapping):
        for key, value in node.items():
            found = _problem(value, f"{where}.{key}", measure or _is_measure(key))
            if found:
                return found
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found = _problem(value, f"{where}[{i}]", measure)
            if found:
                return found
    elif measure and (isinstance(node, str | bool)):
        return f"{where} is not a number ({str(node)[:20]!r})"
    return None


def _found(node: object, path: tuple[str, ...], where: str) -> Iterator[tuple[str, object]]:
    """The values at ``path`` below ``node``, each with where it is (nothing where a step
    is missing or ``node`` is not the container the step names)."""
    if not path:
        yield where, node
        return
    step, rest = path[0], path[1:]
    if step == ANY_ITEM and isinstance(node, list):
        for i, item in enumerate(node):
            yield from _found(item, rest, f"{where}[{i}]")
    elif step == ANY_ITEM and isinstance(node, Mapping):
        for key, value in node.items():
            yield from _found(value, rest, f"{where}.{key}")
    elif isinstance(node, Mapping) and step in node:
        yield from _found(node[step], rest, f"{where}.{step}")


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _scalar_problem(result: object) -> str | None:
    """A SCALAR_MEASURES place of ``result`` that holds neither a number nor null."""
    for path in SCALAR_MEASURES:
        for where, value in _found(result, path, "result"):
            if value is not None and not _is_number(value):
                return f"{where} is not a number ({str(value)[:20]!r})"
    return None


def record_problem(record: Mapping[str, object]) -> str | None:
    """What makes this trial record (a parsed line of trials.jsonl, result included) invalid,
    in a few words naming the field; None when its numbers are all finite and every measure
    is a number."""
    for key in RECORD_NUMBERS:
        value = record.get(key)
        if not _is_number(value) or _bad_number(value):
            return f"{key} is not a finite number ({str(value)[:20]!r})"
    result = record.get("result")
    return _problem(result, "result", False) or _scalar_problem(result)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is not a finite number")
    return value


def _no_constant(text: str) -> float:
    raise ValueError(f"{text} is not a finite number")


def loads_finite(text: str) -> object:
    """``json.loads`` that refuses NaN, Infinity and numbers past the float range
    (ValueError), for files whose numbers are copied into outputs as they are."""
    return json.loads(text, parse_float=_finite_float, parse_constant=_no_constant)
