"""/metrics: the engine's serving metrics and the endpoint's own counts, as Prometheus text
(prometheus-client), read from the engine when scraped.

The engine's metrics() is a JSON object (TTFT/TPOT/ITL/E2E percentiles, throughput, compile
seconds, buckets, peak RSS); each number in it becomes a gauge named by its path
(``compile_ahead_engine_ttft_s_p50``), so whatever the engine adds appears without a change
here. Its status() gives the queue, the running rows and the buckets compiled and compiling.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from compile_ahead.runtime.serving.api import Engine

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PREFIX = "compile_ahead"


class _EngineCollector(Collector):
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def collect(self) -> Iterator[GaugeMetricFamily]:
        status = self._engine.status()
        for key in ("queued", "running"):
            if isinstance(status.get(key), int | float):
                yield _gauge(f"engine_{key}", f"requests {key} in the engine", status[key])
        ready = GaugeMetricFamily(f"{PREFIX}_engine_ready", "1 once the engine serves")
        ready.add_metric([], 1.0 if status.get("ready") else 0.0)
        yield ready
        buckets = status.get("buckets") or {}
        family = GaugeMetricFamily(
            f"{PREFIX}_engine_buckets",
            "buckets [B, C] by state (1 per bucket)",
            labels=["state", "batch", "capacity"],
        )
        for state in ("compiled", "compiling"):
            for bucket in buckets.get(state) or []:
                family.add_metric([state, str(bucket[0]), str(bucket[1])], 1.0)
        yield family
        for name, value in _numbers(self._engine.metrics(), "engine"):
            yield _gauge(name, "serving metric of the engine (metrics())", value)


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(f"{PREFIX}_{name}", doc)
    family.add_metric([], float(value))
    return family


def _numbers(tree: Any, path: str) -> Iterator[tuple[str, float]]:
    """The numbers in a JSON tree, each named by its path (letters, digits and _ only)."""
    if isinstance(tree, int | float):  # bool included
        yield path, float(tree)
    elif isinstance(tree, dict):
        for key, value in tree.items():
            yield from _numbers(value, f"{path}_{re.sub(r'[^A-Za-z0-9_]', '_', str(key))}")


class EndpointMetrics:
    """The registry /metrics shows: the engine's (read when scraped) and the HTTP counts."""

    def __init__(self, engine: Engine) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_EngineCollector(engine))
        self.responses = Counter(
            f"{PREFIX}_http_responses",
            "responses by route and status",
            ["route", "status"],
            registry=self.registry,
        )
        self.in_flight = Gauge(
            f"{PREFIX}_http_requests_in_flight",
            "generation requests being answered",
            registry=self.registry,
        )
        self.disconnects = Counter(
            f"{PREFIX}_http_client_disconnects",
            "requests cancelled because their client went away",
            registry=self.registry,
        )

    def text(self) -> bytes:
        return generate_latest(self.registry)
