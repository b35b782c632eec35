"""The simulator's cost model fitted from what device runs recorded: the engine reports of one
or more replays (``ServingEngine.report()``), each from a fresh engine.

- ``step_s`` per bucket: the mean of an iteration that stepped without a background compile
  (the device's step and the engine's own work); a bucket seen only beside a compile, its
  mean divided by the slowdown. Buckets never stepped take the least-squares plane
  a + b*B + c*C + d*B*C through the others.
- ``background_step_factor``: over the buckets stepped both ways, the steps beside a compile
  against the steps alone (weighted by the steps beside a compile).
- ``prefill_s``: the least-squares line of seconds against the tokens the prefills without a
  background compile cost (whole calls of the prefill graph: the executor's prefill_tokens;
  ``prefill_chunk`` comes with the fixed costs).
- ``compile_s`` per bucket: the median of its compiles that ran alone (before serving or on
  the request path), the first compile of each run left out; ``prefill_compile_s``: the median
  of what a run's first compile took beyond its bucket's; ``background_compile_factor``: how
  much slower a background compile ran while the device worked beside it. The simulator runs
  it at its own pace while the engine idles, so a compile of ``T`` seconds alone that took
  ``W`` with the device busy for ``busy`` of them gives ``T - (W - busy) = busy / factor``;
  the factor is fitted by least squares over the background compiles (through the origin).
  ``background_compile_factors``: the same apart per activity the device worked at beside
  the compiles (``beside_s``: decode steps per batch size, prefills, switches), by least
  squares over the activities that held at least 5% of the busy seconds (the rest keep the
  single factor). Reports without the busy seconds give the median of ``W / T`` and no
  factors per activity. A bucket never compiled alone takes the plane through the others.
- ``activate_s`` and ``copy_s_per_byte``: the least-squares line of a switch's seconds against
  the bytes it copied (the mean when no switch copied).

What a run cannot show (the bytes a bucket holds, a slot's KV bytes, the host's memory) the
caller passes in ``fixed``.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.serving.buckets import Bucket
from compile_ahead.runtime.serving.simulator import Linear
from compile_ahead.runtime.serving.timings import BACKGROUND, LineSums


def fit_cost_model(reports: Sequence[Mapping[str, Any]], fixed: Mapping[str, Any]) -> dict:
    """A cost-model JSON object (simulator.CostModel.from_json reads it) fitted from
    ``reports``; ``fixed`` adds the keys a run cannot show."""
    engines = [r["engine"] for r in reports]
    if not any(e.get("decode_steps") for e in engines):
        raise CompileAheadError("no decode step was recorded: nothing to fit a cost model from")
    steps, factor = _steps(engines)
    compiles, prefill_compile, (compile_factor, compile_factors) = _compiles(engines)
    base, per_token = _line([_prefill_sums(e) for e in engines])
    activate, per_byte = _switch_line(engines)
    return {
        **dict(fixed),
        "step_s": _with_plane(steps),
        "background_step_factor": factor,
        "prefill_s": {"base": base, "per_token": per_token},
        "compile_s": _with_plane(compiles),
        "prefill_compile_s": prefill_compile,
        "background_compile_factor": compile_factor,
        "background_compile_factors": compile_factors,
        "activate_s": activate,
        "copy_s_per_byte": per_byte,
        "fitted_from": {
            "runs": len(engines),
            "policies": sorted({str(e.get("policy")) for e in engines}),
            "decode_steps": sum(int(e.get("decode_steps") or 0) for e in engines),
            "compiles": sum(len(e.get("compiles") or []) for e in engines),
        },
    }


def _steps(engines: Sequence[Mapping[str, Any]]) -> tuple[dict[str, float], float]:
    sums: dict[str, list[float]] = {}  # key -> [n, seconds]
    for e in engines:
        for key, s in e["timings"]["steps"].items():
            acc = sums.setdefault(key, [0.0, 0.0])
            acc[0] += s["n"]
            acc[1] += s["step_s"] + s["engine_s"]
    mean = {k: v[1] / v[0] for k, v in sums.items() if v[0] > 0}
    alone = {k: v for k, v in mean.items() if not k.endswith(BACKGROUND)}
    pairs = [
        (sums[k][0], mean[k] / alone[k.removesuffix(BACKGROUND)])
        for k in mean
        if k.endswith(BACKGROUND) and k.removesuffix(BACKGROUND) in alone
    ]
    weight = sum(n for n, _ in pairs)
    factor = max(1.0, sum(n * r for n, r in pairs) / weight) if weight else 1.0
    for k, v in mean.items():
        if k.endswith(BACKGROUND) and k.removesuffix(BACKGROUND) not in alone:
            alone[k.removesuffix(BACKGROUND)] = v / factor
    return alone, factor


Beside = Mapping[str, float] | None  # a background compile's busy seconds per activity
Factors = tuple[float, dict[str, float]]  # one compile factor, and one per activity


def _compiles(engines: Sequence[Mapping[str, Any]]) -> tuple[dict[str, float], float, Factors]:
    alone: dict[str, list[float]] = {}
    firsts: list[tuple[str, float]] = []
    background: list[tuple[str, float, Beside]] = []  # key, seconds, beside_s
    for e in engines:
        for i, c in enumerate(sorted(e.get("compiles") or [], key=lambda c: c["start_s"])):
            key = Bucket(*c["bucket"]).key
            if i == 0:
                firsts.append((key, c["seconds"]))
            elif c["where"] == "background":
                background.append((key, c["seconds"], c.get("beside_s")))
            else:
                alone.setdefault(key, []).append(c["seconds"])
    table = {k: statistics.median(v) for k, v in alone.items()}
    if not table:  # every run compiled one bucket: it is all we know
        table = {k: statistics.median(s for kk, s in firsts if kk == k) for k, _ in firsts}
        return table, 0.0, (1.0, {})
    plane = _plane(table)
    extra = [max(s - table.get(k, plane(_bucket(k))), 0.0) for k, s in firsts]
    known = [(table[k], s, beside) for k, s, beside in background if table.get(k)]
    return table, statistics.median(extra) if extra else 0.0, _compile_factors(known)


FACTOR_SHARE = 0.05  # an activity with less of the busy seconds keeps the single factor


def _compile_factors(compiles: Sequence[tuple[float, float, Beside]]) -> Factors:
    """The background compile factors from (seconds alone, seconds taken, busy seconds per
    activity or None) per background compile (see the module's docstring); each at least 1
    and at most 1000 (compiles that made no headway while the device worked)."""
    if not compiles:
        return 1.0, {}
    if any(beside is None for _, _, beside in compiles):
        return max(1.0, statistics.median(w / t for t, w, _ in compiles)), {}
    besides = [beside or {} for _, _, beside in compiles]
    busy = np.array([sum(b.values()) for b in besides])
    # what each compile gained while the device worked: T - (W - busy) = sum(busy_k / f_k)
    gained = np.array([t - w for t, w, _ in compiles]) + busy
    if float(busy @ busy) <= 0.0:  # nothing ran beside any of them: no slowdown to see
        return 1.0, {}
    pace = float(np.clip(busy @ gained / (busy @ busy), 1e-3, 1.0))  # 1 / factor
    seen: Counter[str] = Counter()
    for b in besides:
        seen.update(b)  # each activity's busy seconds, summed over the compiles
    names = sorted(k for k, v in seen.items() if v >= FACTOR_SHARE * float(busy.sum()))
    x = np.array([[b.get(k, 0.0) for k in names] for b in besides])
    rest = busy - x.sum(axis=1)  # the activities seen too little, at the single pace
    paces, *_ = np.linalg.lstsq(x, gained - rest * pace, rcond=None)
    paces = np.clip(paces, 1e-3, 1.0)
    return 1.0 / pace, {k: float(1.0 / p) for k, p in zip(names, paces, strict=True)}


def _prefill_sums(e: Mapping[str, Any]) -> Mapping[str, float]:
    return e["timings"]["prefill"].get("alone") or LineSums().to_json()


def _line(parts: Sequence[Mapping[str, float]]) -> tuple[float, float]:
    """The least-squares line (base, slope) from summed (n, x, y, xx, xy), both clipped at 0;
    the mean alone when x does not vary."""
    n, x, y, xx, xy = (sum(float(p[k]) for p in parts) for k in ("n", "x", "y", "xx", "xy"))
    if n == 0:
        return 0.0, 0.0
    det = n * xx - x * x
    slope = (n * xy - x * y) / det if det > 1e-12 * max(n * xx, 1.0) else 0.0
    slope = max(slope, 0.0)
    return max((y - slope * x) / n, 0.0), slope


def _switch_line(engines: Sequence[Mapping[str, Any]]) -> tuple[float, float]:
    sums = LineSums()
    for e in engines:
        for s in e.get("switch_records") or []:
            sums.add(float(s["bytes"]), float(s["seconds"]))
    return _line([sums.to_json()])


def _plane(table: Mapping[str, float]) -> Linear:
    """The non-negative least-squares a + b*B + c*C + d*B*C through ``table`` ("BxC" ->
    value)."""
    from scipy.optimize import nnls  # only a fit needs it

    bc = np.array([[float(v) for v in k.split("x")] for k in table])
    design = np.column_stack([np.ones(len(bc)), bc[:, 0], bc[:, 1], bc[:, 0] * bc[:, 1]])
    a, b, c, d = (float(v) for v in nnls(design, np.array(list(table.values())))[0])
    return Linear(base=a, per_batch=b, per_capacity=c, per_slot=d)


def _bucket(key: str) -> Bucket:
    b, c = key.split("x")
    return Bucket(int(b), int(c))


def _with_plane(table: Mapping[str, float]) -> dict:
    """A Linear cost's JSON: the measured buckets as its table, the plane for the rest."""
    plane = _plane(table)
    return {
        "table": dict(table),
        "base": plane.base,
        "per_batch": plane.per_batch,
        "per_capacity": plane.per_capacity,
        "per_slot": plane.per_slot,
    }
