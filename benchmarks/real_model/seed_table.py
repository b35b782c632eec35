"""The seed's Improvement-1 table on a trained model: a real document forced through the ladder.

Each arm (i1, i2, i3 at each B) and its control, the direct top-rung graph b0 at the same B,
runs in a fresh process: a prompt (the document's first --prompt-len tokens), then the
document's next tokens teacher-forced up to the top rung, so every boundary is crossed (the
seed: a 128-token prompt and 8,064 forced tokens on 1K -> 2K -> 4K -> 8K). Every run keeps
the logits of the steps around each of the ladder's boundaries (RunConfig.keep_window_logits:
b0 records the same windows although it crosses none). From the run reports, per boundary:
the KV the next rung adds (its capacity's growth times the bytes a slot takes, which b0's
reservation gives), the migration time, top-1 agreement with b0 over the window and the
minimum logit cosine; per context range: tokens/s against b0's over the same contexts (from
each step's time and filled length), and the average reserved KV against b0's. The document's
NLL per run is there too, and b0's against each arm's.

The document: the repository's LICENSE, followed (when it encodes to too few tokens) by the
repository's other text files (README.md, then docs/**/*.md sorted), the result names which.

    python benchmarks/real_model/seed_table.py --model smollm2-135m --json seed_table.json
    python benchmarks/real_model/seed_table.py --model DIR --ladder 64,128,256 --prompt-len 16 \\
        --batches 1 --schedules i1   # a small check
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _shared.results import write_result

ROOT = Path(__file__).resolve().parents[2]
MIB = 2**20


def document_files() -> list[Path]:
    """The LICENSE first, then the repository's other text files in a fixed order."""
    docs = sorted((ROOT / "docs").rglob("*.md"))
    return [ROOT / "LICENSE", ROOT / "README.md", *docs]


def build_document(model: str, tokens_needed: int, out: Path) -> dict[str, Any]:
    """The document: files appended until it encodes to ``tokens_needed`` tokens or more
    (the model's tokenizer), written to ``out``; which files, and its token count."""
    from compile_ahead.runtime.sources.resolve import resolve_model

    source = resolve_model(model)
    tokenizer = source.text_tokenizer()
    parts: list[str] = []
    used: list[str] = []
    count = 0
    for path in document_files():
        parts.append(path.read_text())
        used.append(str(path.relative_to(ROOT)))
        count = len(tokenizer.encode("\n\n".join(parts)).ids)
        if count >= tokens_needed:
            break
    if count < tokens_needed:
        raise SystemExit(f"the repository's text files give {count} tokens, not {tokens_needed}")
    out.write_text("\n\n".join(parts))
    return {"files": used, "tokens": count, "path": str(out)}


def run_one(args: argparse.Namespace) -> None:
    """A child: one run of --one SCHEDULE at --batch, its report and window logits saved."""
    from compile_ahead.runtime.compile.settings.options import CompileOptions
    from compile_ahead.runtime.ladder.runner import run_ladder
    from compile_ahead.runtime.ladder.settings.capacities import Ladder
    from compile_ahead.runtime.ladder.settings.config import Prompt, RunConfig
    from compile_ahead.runtime.ladder.settings.schedules import SCHEDULES
    from compile_ahead.runtime.sources.resolve import resolve_model

    source = resolve_model(args.model)
    ladder = Ladder.parse(args.ladder)
    text = Path(args.document).read_text()
    prompt = Prompt(args.prompt_len, origin=f"--text {args.document}", document=text)
    config = RunConfig(
        SCHEDULES[args.one],
        ladder,
        (prompt,) * args.batch,
        decode_tokens=ladder.top - args.prompt_len,
        options=CompileOptions(inference_precision=args.inference_precision),
        keep_window_logits=True,
    )
    result = run_ladder(source, config)
    if result.error is not None:
        raise result.error
    stem = Path(args.out)
    np.save(stem.with_suffix(".npy"), np.stack(result.window_logits))
    data = {
        "report": result.report.to_json(),
        "step_ns": result.step_ns,
        "step_context": result.step_context,
    }
    stem.with_suffix(".json").write_text(json.dumps(data))


def child(args: argparse.Namespace, schedule: str, batch: int, work: Path) -> dict[str, Any]:
    out = work / f"{schedule}-b{batch}"
    cmd = [sys.executable, __file__, "--one", schedule, "--batch", str(batch), "--out", str(out)]
    cmd += ["--model", args.model, "--ladder", args.ladder, "--document", args.document]
    cmd += ["--prompt-len", str(args.prompt_len)]
    if args.inference_precision:
        cmd += ["--inference-precision", args.inference_precision]
    print(f"  {schedule} B={batch} ...", flush=True)
    subprocess.run(cmd, check=True)
    data = json.loads(out.with_suffix(".json").read_text())
    data["window_logits"] = np.load(out.with_suffix(".npy"))
    return data


def _nearest(ladder: list[int], context: int) -> int:
    return min(ladder, key=lambda rung: abs(context - rung))


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64), b.astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def windows(data: dict[str, Any]) -> dict[tuple[int, int], tuple[int, np.ndarray, int]]:
    """(sequence, step) -> (top-1, logits, context) of each recorded window step."""
    entries = data["report"]["boundary_tokens"]
    return {
        (e.get("sequence", 0), e["step"]): (e["top1"], logits, e["context"])
        for e, logits in zip(entries, data["window_logits"], strict=True)
    }


def boundary_rows(arm: dict[str, Any], control: dict[str, Any], ladder: list[int]) -> list[dict]:
    """Per boundary the seed's columns: new KV, migration, top-1 over its window, min cosine."""
    per_slot = control["report"]["kv_reserved_peak_bytes"] / ladder[-1]  # b0: the top, all B
    ours, ref = windows(arm), windows(control)
    rows = []
    for b in arm["report"]["boundaries"]:
        same = [k for k, (_, _, c) in ours.items() if _nearest(ladder, c) == b["from"] and k in ref]
        agree = sum(ours[k][0] == ref[k][0] for k in same)
        cosines = [_cosine(ours[k][1], ref[k][1]) for k in same]
        rows.append(
            {
                "boundary": f"{b['from']} -> {b['to']}",
                "new_kv_mib": (b["to"] - b["from"]) * per_slot / MIB,
                "migration_ms": b["migration_s"] * 1e3,
                "top1": f"{agree} / {len(same)}",
                "min_cosine": min(cosines) if cosines else None,
            }
        )
    return rows


def range_rates(data: dict[str, Any], ladder: list[int], batch: int) -> list[float | None]:
    """Tokens/s per context range [0, r0), [r0, r1), ...: each step gives B tokens."""
    ns, ctx = np.asarray(data["step_ns"]), np.asarray(data["step_context"])
    rates: list[float | None] = []
    low = 0
    for high in ladder:
        sel = (ctx >= low) & (ctx < high)
        seconds = ns[sel].sum() / 1e9
        rates.append(float(sel.sum() * batch / seconds) if seconds else None)
        low = high
    return rates


def table(arm: dict[str, Any], control: dict[str, Any], ladder: list[int], batch: int) -> dict:
    ours, ref = range_rates(arm, ladder, batch), range_rates(control, ladder, batch)
    ranges = []
    low = 0
    for high, a, b in zip(ladder, ours, ref, strict=True):
        delta = (a / b - 1) * 100 if a and b else None
        ranges.append({"context": f"{low}-{high}", "tok_s": a, "b0_tok_s": b, "delta_pct": delta})
        low = high
    kv, kv0 = arm["report"]["kv_reserved_avg_bytes"], control["report"]["kv_reserved_avg_bytes"]
    return {
        "boundaries": boundary_rows(arm, control, ladder),
        "ranges": ranges,
        "kv_reserved_avg_mib": kv / MIB,
        "b0_kv_reserved_avg_mib": kv0 / MIB,
        "kv_reserved_vs_b0_pct": (kv / kv0 - 1) * 100,
        "nll_per_token": arm["report"]["text_score"]["nll_per_token"],
        "b0_nll_per_token": control["report"]["text_score"]["nll_per_token"],
        "tokens_scored": arm["report"]["text_score"]["tokens_scored"],
    }


def print_table(name: str, t: dict) -> None:
    print(f"\n{name}")
    print("| Boundary | New KV | Migration | Top-1 | Min logit cosine |")
    print("|---|---|---|---|---|")
    for r in t["boundaries"]:
        cos = "-" if r["min_cosine"] is None else f"{r['min_cosine']:.7f}"
        print(
            f"| {r['boundary']} | +{r['new_kv_mib']:.1f} MiB | {r['migration_ms']:.1f} ms "
            f"| {r['top1']} | {cos} |"
        )
    print("| Context | tok/s | b0 tok/s | vs b0 |\n|---|---|---|---|")
    for r in t["ranges"]:
        a, b, d = r["tok_s"], r["b0_tok_s"], r["delta_pct"]
        fmt = lambda v, f: "-" if v is None else format(v, f)  # noqa: E731
        print(f"| {r['context']} | {fmt(a, '.2f')} | {fmt(b, '.2f')} | {fmt(d, '+.2f')}% |")
    print(
        f"average reserved KV {t['kv_reserved_avg_mib']:.1f} MiB vs b0 "
        f"{t['b0_kv_reserved_avg_mib']:.1f} MiB ({t['kv_reserved_vs_b0_pct']:+.1f}%); "
        f"NLL {t['nll_per_token']:.5f} (b0 {t['b0_nll_per_token']:.5f}) nats/token over "
        f"{t['tokens_scored']} tokens"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", required=True, help="a model with a tokenizer (GGUF, checkpoint)")
    p.add_argument("--ladder", default="1024,2048,4096,8192")
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--schedules", default="i1,i2,i3")
    p.add_argument("--batches", default="1,4")
    p.add_argument("--inference-precision", default=None, help="default: the device's")
    p.add_argument("--work", type=Path, default=Path("out/seed_table_work"))
    p.add_argument("--json", type=Path, default=None, help="write the result file here")
    p.add_argument("--document", default=None, help=argparse.SUPPRESS)  # a child's
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)  # a child's schedule
    p.add_argument("--batch", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        run_one(args)
        return
    ladder = [int(r) for r in args.ladder.split(",")]
    args.work.mkdir(parents=True, exist_ok=True)
    document = build_document(args.model, ladder[-1] + 1, args.work / "document.txt")
    args.document = document["path"]
    print(f"document: {' + '.join(document['files'])} ({document['tokens']} tokens)")
    results: dict[str, Any] = {"document": document, "tables": {}}
    for batch in (int(b) for b in args.batches.split(",")):
        control = child(args, "b0", batch, args.work)
        for schedule in args.schedules.split(","):
            arm = child(args, schedule, batch, args.work)
            name = f"{schedule} B={batch}"
            results["tables"][name] = table(arm, control, ladder, batch)
            print_table(name, results["tables"][name])
    if args.json:
        write_result(args.json, "seed_table", results, args)


if __name__ == "__main__":
    main()
