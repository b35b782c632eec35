"""The endpoints of a serving experiment, read from a serving report (`compile-ahead serve
--out`, or ``ServingEngine.report()`` in process): what `ab serve` pairs, and what
benchmarks/serving/policies_paired.py pairs over its seeds.

The report's own figures (runtime/serving/metrics.py): time to ready (engine start to the first
token of the first request), TTFT p50/p99 and TPOT p50 over the finished requests, goodput (requests
per second that met every SLO the trials were given; with none, every finished request
counts), output tokens per second, compile seconds on the request path (compiles requests
waited for), peak RSS. With a cold window, the TTFT p99 of the requests that arrived in its
first seconds, from the report's per-request records.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from compile_ahead.profiling.trials.analysis import Endpoint, Getter, result_field


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def cold_ttft_p99(until_s: float) -> Getter:
    """TTFT p99 of the requests that arrived in the first ``until_s`` seconds and were
    served (numpy's linear percentile, as the report's own); None without such a request."""

    def get(report: dict) -> float | None:
        found = []
        for record in report.get("requests") or []:
            if not isinstance(record, dict):
                continue
            arrival, ttft = _number(record.get("arrival_s")), _number(record.get("ttft_s"))
            if arrival is not None and ttft is not None and arrival <= until_s:
                found.append(ttft)
        return float(np.percentile(found, 99)) if found else None

    return get


def serve_endpoints(cold_s: float | None = None) -> list[Endpoint]:
    """The serving endpoints; with ``cold_s``, the cold-start TTFT p99 too."""
    f = result_field
    m = ("requests_metrics",)
    eps = [
        Endpoint("time_to_ready", "Time to ready (start to first token)", "s", "lower",
                 f("engine", "time_to_ready_s")),
        Endpoint("ttft_p50", "TTFT p50", "s", "lower", f(*m, "ttft_s", "p50")),
        Endpoint("ttft_p99", "TTFT p99", "s", "lower", f(*m, "ttft_s", "p99")),
        Endpoint("tpot_p50", "TPOT p50", "s", "lower", f(*m, "tpot_s", "p50")),
        Endpoint("goodput", "Goodput", "req/s", "higher", f(*m, "goodput_per_s")),
        Endpoint("output_tok_s", "Output tokens/s", "tok/s", "higher",
                 f(*m, "output_tokens_per_s")),
        Endpoint("compile_request_path", "Compile on the request path", "s", "lower",
                 f("engine", "compile_s", "request_path")),
        Endpoint("peak_rss", "Peak RSS", "bytes", "lower", f("engine", "peak_rss_bytes")),
    ]  # fmt: skip
    if cold_s is not None:
        eps.insert(3, Endpoint("cold_ttft_p99", f"TTFT p99, arrivals in the first {cold_s:g} s",
                               "s", "lower", cold_ttft_p99(cold_s)))  # fmt: skip
    return eps


def report_values(report: dict, endpoints: Sequence[Endpoint]) -> dict[str, float | None]:
    """Each endpoint's value in one serving report (None where it has none)."""
    return {ep.key: ep.get(report) for ep in endpoints}
