"""The tables a profile-compile session prints at its end: a row per profiled compile, the
passes that took most time, the process's peak RSS."""

from __future__ import annotations

from typing import Any

from compile_ahead.profiling.session import passprofile


def print_tables(
    report: dict[str, Any], pass_profiles: list[passprofile.PassProfile], top: int, by_batch: bool
) -> None:
    if report["rungs"]:
        print()
        print(format_table(report["rungs"], by_batch=by_batch))
    if pass_profiles:
        totals = passprofile.pass_self_totals(pass_profiles)
        print()
        print(format_top_passes(totals, top, len(report["rungs"])))
    print()
    print(f"peak RSS of the process: {fmt_mb(report['peak_rss_bytes'])} MiB")
    dep = report["depsort_counters"]
    if dep["available"]:
        print(f"NPU compiler dependency-sort counters: {dep}")


def fmt_mb(value: int | None) -> str:
    return "n/a" if value is None else f"{value / 2**20:.0f}"


def format_table(rungs: list[dict], by_batch: bool = False) -> str:
    """A row per profiled compile; ``by_batch``: with a B column (rungs profiled at several
    B, or at one B above 1)."""
    head = (
        "rung C",
        *(("B",) if by_batch else ()),
        "kind",
        "total s",
        "build s",
        "compile_model s",
        "transforms s",
        "dnnl create s*",
        "other s",
        "peak RSS MiB",
        "RSS +MiB",
    )
    rows = []
    for r in rungs:
        ph = r["phases_ns"]
        rows.append(
            (
                str(r["capacity"]),
                *((str(r.get("batch", 1)),) if by_batch else ()),
                _kind(r),
                _fmt_s(ph["total"]),
                _fmt_s(ph["build"]),
                _fmt_s(ph["compile_model"]),
                _fmt_s(ph["transformations"]),
                _fmt_s(ph["primitive_create"]),
                _fmt_s(ph["other"]),
                fmt_mb(r["rss_peak_bytes"]),
                fmt_mb(r["rss_after_bytes"] - r["rss_before_bytes"]),
            )
        )
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(head, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    lines.append(
        "* oneDNN primitive creation summed over threads; transforms = outermost pass managers; "
        "other = compile_model - transforms - dnnl create"
    )
    return "\n".join(lines)


def format_top_passes(totals: list[passprofile.PassTotal], top: int, compiles: int) -> str:
    """The passes that took most time: self time (without the managers a pass ran) summed over
    managers and compiles, with call counts."""
    shown = totals[:top]
    head = ("self s", "calls", "managers")
    rows = [(f"{t.self_ns / 1e9:.3f}", str(t.calls), str(t.managers)) for t in shown]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head)]
    lines = [
        f"passes that took most time: top {len(shown)} of {len(totals)}, self time summed over "
        f"managers and {compiles} compile(s)",
        "  ".join(h.rjust(w) for h, w in zip(head, widths, strict=True)) + "  pass",
    ]
    for row, t in zip(rows, shown, strict=True):
        lines.append(
            "  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) + f"  {t.name}"
        )
    return "\n".join(lines)


def _kind(row: dict) -> str:
    return f"prefill L={row['chunk']}" if row.get("kind") == "prefill" else str(row.get("kind"))


def _fmt_s(ns: int | None) -> str:
    return "n/a" if ns is None else f"{ns / 1e9:.2f}"
