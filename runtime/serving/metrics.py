"""Serving metrics as serving users read them (the names and definitions of `vllm bench serve`):

- TTFT: arrival to first token; TPOT: (last token - first token) / (tokens - 1), per request;
  ITL: every gap between two tokens of a request; E2E: arrival to last token. Each as mean,
  p50, p90 and p99 in seconds (numpy's linear percentile).
- request throughput and output tokens/s over the span from the first arrival to the last
  finish; goodput: requests per second that met every stated SLO (DistServe's definition,
  `vllm bench serve --goodput ttft:MS tpot:MS e2el:MS`).
- the engine's own: time to ready (start to the first token of the first request), compile
  seconds on the request path (requests waited) and in the background, buckets compiled and
  used, bucket switches, KV bytes copied, peak RSS.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from compile_ahead.runtime.serving.buckets import Bucket
from compile_ahead.runtime.serving.requests import Live, State
from compile_ahead.runtime.serving.timings import Timings


@dataclass(frozen=True)
class Slo:
    """Service-level objectives a request must all meet to count toward goodput (None: not
    stated)."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None

    def met(self, live: Live) -> bool:
        ttft, tpot, e2e = ttft_of(live), tpot_of(live), e2e_of(live)
        return (
            (self.ttft_s is None or (ttft is not None and ttft <= self.ttft_s))
            and (self.tpot_s is None or tpot is None or tpot <= self.tpot_s)
            and (self.e2e_s is None or (e2e is not None and e2e <= self.e2e_s))
        )

    def to_json(self) -> dict:
        return {"ttft_s": self.ttft_s, "tpot_s": self.tpot_s, "e2e_s": self.e2e_s}


@dataclass
class EngineStats:
    """What the engine itself did, on its clock (seconds since it started)."""

    policy: str = ""
    clock: str = "wall"  # "wall" (a device) or "virtual" (the simulator)
    first_token_s: float | None = None  # the first token of any request
    ready_s: float | None = None  # a bucket could serve
    first_prefill_s: float | None = None  # the first request's prefill
    compile_request_path_s: float = 0.0  # compiles requests waited for
    compile_background_s: float = 0.0
    compile_before_serving_s: float = 0.0  # the up-front warm-up
    compile_waited_s: float = 0.0  # requests waiting on a background compile still running
    compiles: list[dict] = field(default_factory=list)  # bucket, seconds, where, start
    buckets_compiled: set[Bucket] = field(default_factory=set)
    buckets_used: set[Bucket] = field(default_factory=set)
    buckets_released: list[Bucket] = field(default_factory=list)
    switches: list[dict] = field(default_factory=list)  # from, to, at, seconds, bytes
    switch_count: int = 0  # every switch, also those no longer kept in ``switches``
    kv_bytes_copied: int = 0
    steps: int = 0
    peak_rss_bytes: int = 0  # measured (device) or modelled (simulator)
    peak_resident_bucket_bytes: int = 0
    timings: Timings = field(default_factory=Timings)  # what a cost model is fitted from

    def keep_newest(self, keep: int) -> None:
        """Forget all but the newest ``keep`` switches, compiles and releases (a listening
        server's bounded memory); the counts and seconds stay whole."""
        for kept in (self.switches, self.compiles, self.buckets_released):
            del kept[:-keep]

    def to_json(self) -> dict:
        return {
            "policy": self.policy,
            "clock": self.clock,
            "time_to_ready_s": self.first_token_s,
            "first_bucket_ready_s": self.ready_s,
            "first_prefill_s": self.first_prefill_s,
            "compile_s": {
                "request_path": self.compile_request_path_s,
                "background": self.compile_background_s,
                "before_serving": self.compile_before_serving_s,
                "waited_for_background": self.compile_waited_s,
            },
            "compiles": self.compiles,
            "buckets_compiled": sorted([list(b) for b in self.buckets_compiled]),
            "buckets_used": sorted([list(b) for b in self.buckets_used]),
            "buckets_released": [list(b) for b in self.buckets_released],
            "switches": self.switch_count,
            "switch_records": self.switches,  # the newest, when a listening server forgets
            "kv_bytes_copied": self.kv_bytes_copied,
            "decode_steps": self.steps,
            "peak_rss_bytes": self.peak_rss_bytes,
            "peak_resident_bucket_bytes": self.peak_resident_bucket_bytes,
            "timings": self.timings.to_json(),
        }


def ttft_of(live: Live) -> float | None:
    return live.token_times[0] - live.request.arrival_s if live.token_times else None


def tpot_of(live: Live) -> float | None:
    t = live.token_times
    return (t[-1] - t[0]) / (len(t) - 1) if len(t) > 1 else None


def e2e_of(live: Live) -> float | None:
    return live.token_times[-1] - live.request.arrival_s if live.token_times else None


def itls_of(live: Live) -> list[float]:
    t = live.token_times
    return [b - a for a, b in itertools.pairwise(t)]


def distribution(values: Sequence[float]) -> dict[str, float | int | None]:
    """Mean, p50, p90 and p99 (None without values) and the count."""
    if not values:
        return {"n": 0, "mean": None, "p50": None, "p90": None, "p99": None}
    a = np.asarray(values, np.float64)
    p50, p90, p99 = (float(v) for v in np.percentile(a, [50, 90, 99]))
    return {"n": len(a), "mean": float(a.mean()), "p50": p50, "p90": p90, "p99": p99}


def request_metrics(lives: Iterable[Live], slo: Slo) -> dict:
    """The latency distributions, throughputs and goodput of the requests so far."""
    every = list(lives)
    served = [x for x in every if x.state is State.FINISHED and x.token_times]
    refused = [x for x in every if x.state is State.REFUSED]
    if served:
        start = min(x.request.arrival_s for x in every)
        span = max(x.token_times[-1] for x in served) - start
    else:
        span = 0.0
    tokens = sum(len(x.tokens) for x in served)

    def rate(n: int) -> float | None:
        return n / span if span > 0 else None

    by_reason: dict[str, int] = {}
    for x in every:
        if x.finish_reason is not None:
            by_reason[x.finish_reason] = by_reason.get(x.finish_reason, 0) + 1
    good = sum(1 for x in served if slo.met(x))
    return {
        "requests": {
            "total": len(every),
            "finished": len(served),
            "refused": len(refused),
            "by_reason": by_reason,
            "refusals": [{"id": x.request_id, "message": x.message} for x in refused],
        },
        "ttft_s": distribution([v for x in served if (v := ttft_of(x)) is not None]),
        "tpot_s": distribution([v for x in served if (v := tpot_of(x)) is not None]),
        "itl_s": distribution([v for x in served for v in itls_of(x)]),
        "e2e_s": distribution([v for x in served if (v := e2e_of(x)) is not None]),
        "span_s": span,
        "output_tokens": tokens,
        "request_throughput_per_s": rate(len(served)),
        "output_tokens_per_s": rate(tokens),
        "goodput_per_s": rate(good),
        "slo": slo.to_json(),
        "slo_met": good,
    }


def first_minutes(lives: Iterable[Live], until_s: float) -> list[Live]:
    """The requests that arrived in the first ``until_s`` seconds (cold-start figures)."""
    return [x for x in lives if x.request.arrival_s <= until_s]
