"""The serve kind as the trials engine runs it: the keys of its experiment.json, and its
analysis (the serving report's endpoints; requests served, buckets compiled and the tokens
each request got against the control's, as counts)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType

from compile_ahead.profiling.trials.analysis import Tally, analyse, block_results
from compile_ahead.profiling.trials.design import Plan
from compile_ahead.profiling.trials.experiment import ExperimentAnalysis
from compile_ahead.profiling.trials.runner import Arm, TrialRecord
from compile_ahead.profiling.trials.serve_kind.endpoints import serve_endpoints
from compile_ahead.profiling.trials.serve_kind.experiment import model_label

DASH = "\u2014"


class ServeKind:
    keys: Mapping[str, type] = MappingProxyType({"buckets": list, "trace": dict})

    def analyse(
        self, exp: dict, records: list[TrialRecord], plan: Plan, arms: list[Arm]
    ) -> ExperimentAnalysis:
        cold_s = exp.get("cold_s")
        analysis = analyse(records, plan, serve_endpoints(cold_s))
        per_block = block_results(records, plan)
        analysis.tallies += [
            requests_tally(per_block),
            buckets_tally(per_block),
            tokens_tally(per_block, plan.arms[0]),
        ]
        results = [r for rs in per_block.values() for r in rs]
        context = {
            "model": model_label(results),
            "trace": _trace_text(exp["trace"]),
            "grid": f"batch sizes {_ints(exp['buckets'])} x capacities {_ints(exp['ladder'])}",
            "control": plan.arms[0],
        }
        if exp.get("serve_flags"):
            context["every trial's serve flags"] = " ".join(exp["serve_flags"])
        title = f"Serving A/B: {' vs '.join(plan.arms)}"
        return ExperimentAnalysis(self, analysis, None, arms, context, {}, "serve_ab", title)

    def sections(self, a: ExperimentAnalysis) -> tuple[list[str], dict]:
        return [], {}

    def plots(self, a: ExperimentAnalysis, out: Path) -> list[Path]:
        return []


def _ints(values: Sequence[object]) -> str:
    return ",".join(str(v) for v in values)


def _trace_text(trace: dict) -> str:
    where = trace.get("source", "?")
    count = trace.get("requests", "?")
    return f"{count} requests from {where}, every trial replaying {trace.get('file', '?')}"


def _span(values: list[int]) -> str:
    return str(values[0]) if min(values) == max(values) else f"{min(values)}-{max(values)}"


def _count(res: dict, key: str) -> int | None:
    counts = (res.get("requests_metrics") or {}).get("requests") or {}
    value = counts.get(key) if isinstance(counts, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def requests_tally(per_block: dict[str, list[dict | None]]) -> Tally:
    """Per arm: requests finished and refused of the trace (a range where trials differ)."""
    per_arm = {}
    for arm, results in per_block.items():
        rows = [
            counts
            for res in results
            if res is not None
            for counts in [[_count(res, k) for k in ("finished", "total", "refused")]]
            if None not in counts
        ]
        if not rows:
            per_arm[arm] = DASH
            continue
        finished, total, refused = ([int(row[i] or 0) for row in rows] for i in range(3))
        per_arm[arm] = f"{_span(finished)} / {_span(total)} finished, {_span(refused)} refused"
    return Tally("Requests served (per trial)", per_arm)


def buckets_tally(per_block: dict[str, list[dict | None]]) -> Tally:
    """Per arm: buckets compiled and used per trial."""
    per_arm = {}
    for arm, results in per_block.items():
        engines = [res.get("engine") for res in results if res is not None]
        pairs = [
            (len(e["buckets_compiled"]), len(e["buckets_used"]))
            for e in engines
            if isinstance(e, dict)
            and isinstance(e.get("buckets_compiled"), list)
            and isinstance(e.get("buckets_used"), list)
        ]
        per_arm[arm] = (
            f"{_span([c for c, _ in pairs])} compiled, {_span([u for _, u in pairs])} used"
            if pairs
            else DASH
        )
    return Tally("Buckets (per trial)", per_arm)


def _tokens(res: dict) -> dict[str, list]:
    """Request id -> the tokens it got, where the report has them (not on the simulator)."""
    found = {}
    for record in res.get("requests") or []:
        if isinstance(record, dict) and isinstance(record.get("tokens"), list):
            found[str(record.get("id"))] = record["tokens"]
    return found


def tokens_tally(per_block: dict[str, list[dict | None]], control: str) -> Tally:
    """Per arm: requests whose tokens equal the same request's in the control's trial of the
    same block (greedy decoding: a policy changes when tokens come, never which)."""
    per_arm = {control: "control"}
    for arm, results in per_block.items():
        if arm == control:
            continue
        equal = compared = 0
        for ref, res in zip(per_block[control], results, strict=True):
            if ref is None or res is None:
                continue
            theirs, ours = _tokens(ref), _tokens(res)
            for rid in theirs.keys() & ours.keys():
                compared += 1
                equal += int(theirs[rid] == ours[rid])
        per_arm[arm] = f"{equal} / {compared} requests" if compared else DASH
    return Tally(f"Tokens equal to {control}'s", per_arm)


SERVE = ServeKind()
