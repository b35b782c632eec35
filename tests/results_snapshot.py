"""What a reader of results sees, reduced to what must not change when the code that reads
them does: the sections of a report or a page, and every verdict and flag in them. Parsed from
the commands' outputs as text (no compile_ahead import), so the same code recorded the snapshot
of tests/fixtures/results-v0 with the code that wrote those results."""

from __future__ import annotations

import json
import re
from pathlib import Path

_HEADING = re.compile(r"<h([1-3])[^>]*>(.*?)</h\1>", re.S)
_STATUS = re.compile(r'<td class="status[^"]*"[^>]*>(.*?)</td>', re.S)
_FLAGGED = re.compile(r'data-flagged="1"')
_TAG = re.compile(r"<[^>]+>")


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", _TAG.sub("", html)).strip()


def page(path: Path) -> dict:
    """A compare page: its headings, the status cells of its tables, its flagged rows."""
    html = path.read_text()
    return {
        "headings": [_text(m.group(2)) for m in _HEADING.finditer(html)],
        "statuses": sorted(_text(m.group(1)) for m in _STATUS.finditer(html)),
        "flagged_rows": len(_FLAGGED.findall(html)),
    }


def _md_sections(text: str) -> list[str]:
    """A markdown report's headings and the lines that open its lists ("Verdicts (...):")."""
    return [
        line
        for line in text.splitlines()
        if line.startswith("#") or (line.endswith(":") and not line.startswith(("-", "|", " ")))
    ]


def ab_report(directory: Path, stem: str) -> dict:
    """An `ab` report (STEM.md, STEM.json): its sections, verdict lines and judgements."""
    md = (directory / f"{stem}.md").read_text()
    data = json.loads((directory / f"{stem}.json").read_text())
    verdicts = md.split("Verdicts (what the test supports):\n", 1)[-1].split("\n\n", 1)[0]
    return {
        "sections": _md_sections(md),
        "verdicts": [line for line in verdicts.splitlines() if line.startswith("- ")],
        "judgements": {
            f"{e['key']} {arm}": None if j is None else [j["status"], j["flagged"]]
            for e in data["endpoints"]
            for arm, j in sorted((e.get("judgements") or {}).items())
        },
    }


def campaign_report(directory: Path) -> dict:
    """A `campaign report`: its sections, and each cross-cell row's verdict and flag."""
    md = (directory / "campaign.md").read_text()
    data = json.loads((directory / "campaign.json").read_text())
    return {
        "sections": _md_sections(md),
        "rows": [
            f"{r['cell']} | {r['label']} | {r['versus']} | {r['verdict']} | "
            f"{'flagged' if r['flagged'] else '-'}"
            for r in data["rows"]
        ],
        "cells": sorted(c["dir"] for c in data["cells"]),
    }


def _run(*argv: object) -> None:
    from cli import run_cli

    done = run_cli(*argv)
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, argv))}: exit {done.returncode}\n{done.stderr}")


def collect(root: Path) -> dict:
    """Every reader run on the results under ``root`` (a copy: the commands write into it)."""
    for name in ("ab-compile", "ab-schedule"):
        _run("ab", "report", root / name, "--no-plot")
    _run("campaign", "report", root / "campaign.sqlite", "--out", root / "report", "--no-plot")
    pages = {}
    for name in ("ab-compile", "ab-schedule", "profile", "campaign-report", "campaign.sqlite"):
        _run("compare", root / name, "--out", root / f"{name}.page.html")
        pages[name] = page(root / f"{name}.page.html")
    return {
        "ab report": {
            "ab-compile": ab_report(root / "ab-compile", "compile_ab"),
            "ab-schedule": ab_report(root / "ab-schedule", "schedule_ab"),
        },
        "campaign report": campaign_report(root / "report"),
        "compare": pages,
    }


if __name__ == "__main__":  # record the snapshot: python tests/results_snapshot.py FIXTURE OUT
    import shutil
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "results"
        shutil.copytree(sys.argv[1], copy)
        Path(sys.argv[2]).write_text(json.dumps(collect(copy), indent=1, ensure_ascii=False) + "\n")
