"""A warm compile cache against OpenVINO's own (CACHE_DIR), on the same rung graph.

Per model and round, each arm in fresh processes, cold (empty cache) then warm:
  - ours: `compile-ahead run --schedule b0 --ladder C --prefill-chunk 1 --cache-dir D`, whose
    one graph is the C rung's decode graph; its report's foreground_compile_s (KV reservation,
    lookup, check and import_model on a hit), and the hit's import_s and verify_s (the check);
  - openvino: the same graph (ModelSource.build_graph, the run's compile properties) through
    compile_model with CACHE_DIR; the compile_model seconds (and, apart, the build's, which its
    cache needs on every call as it hashes the whole graph, and an infer request's, which our
    foreground includes);
  - with --baseline-python, ours again under another installation (e.g. a venv of main): the
    cold runs then compare this code against it ("cold runs no slower than before").
Arms are interleaved, their order rotating per round, after an untimed warm-up round (--warmup).
Printed per model: medians, the per-round ratio ours warm / openvino warm, the check's share of
the warm import, and cold against cold (geometric mean of the paired ratios, its 95% interval).
--no-openvino leaves OpenVINO's arm out and --cold-only the warm runs: ours against the
baseline cold, with more pairs in the same time.

Models: a transformers random init of --preset's shapes (Qwen2.5-0.5B by default) saved with
save_pretrained in bf16, and its optimum-intel exports (--formats, FP16/INT8/INT4 by default;
benchmarks/peers/ir_exports.py), all written to --work once and reused.

    python benchmarks/cache/warm_import_vs_ov_cache.py [--preset qwen2.5-0.5b] [--capacity 1024]
        [--formats fp16,int8,int4] [--rounds 5] [--warmup 1] [--baseline-python PY] [--work DIR]
        [--no-openvino] [--cold-only] [--json out.json]
    python benchmarks/cache/warm_import_vs_ov_cache.py --preset tiny --capacity 64 --rounds 1 \
        --formats fp16,int8
        (a quick end-to-end check, not a measurement; optimum's INT4 groups of 128 need a
        hidden size the tiny preset does not have)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _shared
from _shared.common import fresh_json, median, orders, round_order, run_checked
from _shared.models import export, hf_checkpoint
from _shared.results import write_result

from compile_ahead.profiling.trials.stats import paired_summary

PROMPT = ["--prompt-len", "8", "--decode-tokens", "2", "--prefill-chunk", "1"]
TIMEOUT_S = 3600


def hide_broken_torchvision(work: Path) -> None:
    """transformers and optimum-intel import torchvision when present; a wheel built for another
    torch fails to import and takes them down (see pyproject.toml). Hidden here and, through a
    sitecustomize on PYTHONPATH, in the exporter processes."""
    probe = subprocess.run([sys.executable, "-c", "import torchvision"], capture_output=True)
    if probe.returncode == 0:
        return
    sys.modules["torchvision"] = None  # type: ignore[assignment]
    hide = work / "_hide_torchvision"
    hide.mkdir(parents=True, exist_ok=True)
    (hide / "sitecustomize.py").write_text('import sys\nsys.modules["torchvision"] = None\n')
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(hide), os.getenv("PYTHONPATH")]))


def prepare_models(preset: str, formats: list[str], work: Path) -> dict[str, Path]:
    from compile_ahead.runtime.model.presets import PRESETS

    # optimum-cli beside this interpreter, whether or not its venv is activated
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])
    checkpoint = hf_checkpoint(PRESETS[preset].config, work / f"{preset}-random-bf16", "bf16")
    models = {"bf16 checkpoint": checkpoint}
    for fmt in formats:
        print(f"exporting {fmt} IR (once) ...", flush=True)
        models[f"{fmt} IR"] = export(checkpoint, work / f"{preset}-random-{fmt}", fmt)
    return models


def command_of(python: str) -> list[str]:
    """The `compile-ahead` command of the installation ``python`` belongs to: its console
    script (the one entry point every version has), else the commands package."""
    script = Path(python).parent / "compile-ahead"
    return [str(script)] if script.exists() else [python, "-m", "compile_ahead.commands"]


def run_ours(python: str, model: Path, capacity: int, cache_dir: Path) -> dict[str, float]:
    """One `run` with the compile cache in ``cache_dir``: its foreground compile seconds and
    the rung's cache state, import and check seconds."""
    report = cache_dir.with_suffix(".report.json")
    cmd = [*command_of(python), "run", "--model", str(model), "--schedule", "b0"]
    cmd += ["--ladder", str(capacity), *PROMPT, "--cache-dir", str(cache_dir)]
    cmd += ["--report", str(report), "--no-progress"]
    run_checked(cmd, timeout=TIMEOUT_S)
    data = json.loads(report.read_text())
    (job,) = [j for j in data["compile_jobs"] if j["capacity"] == capacity and j["chunk"] == 1]
    return {
        "foreground_s": data["foreground_compile_s"],
        "cache": job["cache"],
        "import_s": job.get("import_s") or 0.0,
        "verify_s": job.get("verify_s") or 0.0,
    }


def ov_child(model: str, capacity: int, cache_dir: str) -> None:
    """(In a child process.) The run's rung graph compiled with OpenVINO's CACHE_DIR."""
    from compile_ahead.runtime.base.ov_core import core
    from compile_ahead.runtime.compile.settings.options import CompileOptions, device_config
    from compile_ahead.runtime.graphs.spec import GraphSpec
    from compile_ahead.runtime.sources.resolve import resolve_model

    options = CompileOptions("CPU").resolved().for_graph("decode")
    config = {**device_config(options), "CACHE_DIR": cache_dir}
    core().get_property("CPU", "FULL_DEVICE_NAME")  # the plugin loaded, as in a run
    t0 = time.perf_counter()
    graph = resolve_model(model).build_graph(GraphSpec(capacity, 1, options.kv_precision))
    t1 = time.perf_counter()
    compiled = core().compile_model(graph, "CPU", config)
    t2 = time.perf_counter()
    compiled.create_infer_request()  # a run's foreground makes one too
    t3 = time.perf_counter()
    hit = bool(compiled.get_property("LOADED_FROM_CACHE"))
    times = {"build_s": t1 - t0, "compile_model_s": t2 - t1, "request_s": t3 - t2}
    print(json.dumps({**times, "hit": hit}))


def run_openvino(model: Path, capacity: int, cache_dir: Path) -> dict[str, float]:
    cmd = [sys.executable, __file__, "--ov-child", str(model), str(capacity), str(cache_dir)]
    return fresh_json(cmd, timeout=TIMEOUT_S)


def cold_then_warm(
    arm: str, python: str, model: Path, capacity: int, work: Path, cold_only: bool
) -> dict:
    """One cold run (empty cache) of ``arm`` and, unless ``cold_only``, a warm one after it."""
    cache_dir = work / f"cache-{arm}"
    shutil.rmtree(cache_dir, ignore_errors=True)
    runs = 1 if cold_only else 2
    if arm == "openvino":
        res = [run_openvino(model, capacity, cache_dir) for _ in range(runs)]
        assert not res[0]["hit"] and all(r["hit"] for r in res[1:]), res
    else:
        res = [run_ours(python, model, capacity, cache_dir) for _ in range(runs)]
        assert res[0]["cache"] == "miss" and all(r["cache"] == "hit" for r in res[1:]), res
    shutil.rmtree(cache_dir, ignore_errors=True)
    return {"cold": res[0], "warm": res[1] if len(res) > 1 else None}


def measure(model: Path, arms: dict[str, str], args: argparse.Namespace) -> dict:
    """``rounds`` timed rounds after ``warmup`` untimed ones. The first process to read a model
    in a while may read its weights from disk rather than the page cache, and its cold compile
    pays for that read; without a warm-up it always fell on the arm that opens round 1."""

    def once(arm: str) -> dict:
        return cold_then_warm(arm, arms[arm], model, args.capacity, args.work, args.cold_only)

    for w in range(args.warmup):
        for arm in round_order(list(arms), w):
            print(f"  warm-up {arm:9s} {summary(once(arm))} (not counted)", flush=True)
    results: dict[str, list[dict]] = {arm: [] for arm in arms}
    for r, order in orders(list(arms), args.rounds):
        for arm in order:
            results[arm].append(once(arm))
            print(f"  round {r + 1} {arm:9s} {summary(results[arm][-1])}", flush=True)
    return results


def summary(res: dict) -> str:
    cold, warm = res["cold"], res["warm"]
    if "compile_model_s" in cold:
        text = f"compile_model cold {cold['compile_model_s']:.3f} s"
        return text if warm is None else f"{text}, warm {warm['compile_model_s']:.3f} s"
    text = f"foreground cold {cold['foreground_s']:.3f} s"
    if warm is None:
        return text
    return (
        f"{text}, warm {warm['foreground_s']:.3f} s "
        f"(import {warm['import_s']:.3f} s, check {warm['verify_s']:.3f} s)"
    )


def med(xs: list[float]) -> str:
    return f"{median(xs):.3f} s"


def ratios(a: list[float], b: list[float]) -> str:
    """a / b as the trial statistics give it (paired_summary): the paired ratios' geometric
    mean and its 95% interval, then the rounds' range."""
    rs = [x / y for x, y in zip(a, b, strict=True)]
    s = paired_summary(b, a)
    interval = (
        "" if s.ratio_ci_low is None else f"95% CI {s.ratio_ci_low:.3f}-{s.ratio_ci_high:.3f}, "
    )
    return f"{s.geomean_ratio:.3f} ({interval}rounds {min(rs):.3f}-{max(rs):.3f})"


def print_model(label: str, res: dict[str, list[dict]]) -> None:
    def of(arm: str, phase: str, key: str) -> list[float]:
        return [r[phase][key] for r in res[arm]]

    print(f"{label}:")
    cold = of("ours", "cold", "foreground_s")
    if "baseline" in res:
        print(f"  cold ours / baseline: {ratios(cold, of('baseline', 'cold', 'foreground_s'))}")
    if res["ours"][0]["warm"] is None:
        return
    warm = of("ours", "warm", "foreground_s")
    if "baseline" in res:
        print(f"  warm ours / baseline: {ratios(warm, of('baseline', 'warm', 'foreground_s'))}")
    if "openvino" not in res:
        return
    ov_warm, ov_cold = (
        of("openvino", "warm", "compile_model_s"),
        of("openvino", "cold", "compile_model_s"),
    )
    checks = zip(of("ours", "warm", "verify_s"), of("ours", "warm", "import_s"), strict=True)
    share = median([v / i for v, i in checks])
    print(f"  warm: ours foreground {med(warm)}, OpenVINO CACHE_DIR compile_model {med(ov_warm)}")
    build, request = of("openvino", "warm", "build_s"), of("openvino", "warm", "request_s")
    print(f"    (OpenVINO's also needs the graph built: {med(build)};")
    print(f"    an infer request, which our foreground makes too: {med(request)})")
    print(f"  warm ours / OpenVINO: {ratios(warm, ov_warm)}  (target <= 1.1)")
    print(f"  the check's share of the warm import: {100 * share:.1f}%  (target < 10%)")
    print(f"  cold: ours foreground {med(cold)}, OpenVINO compile_model {med(ov_cold)}")


def main() -> int:
    if len(sys.argv) == 5 and sys.argv[1] == "--ov-child":
        ov_child(sys.argv[2], int(sys.argv[3]), sys.argv[4])
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="qwen2.5-0.5b", help="the shapes of the random model")
    p.add_argument("--capacity", type=int, default=1024, help="the rung (its decode graph)")
    p.add_argument("--formats", default="fp16,int8,int4", help="IR exports; 'none' for none")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1, help="untimed rounds per model first")
    p.add_argument(
        "--no-openvino",
        action="store_true",
        help="leave OpenVINO's CACHE_DIR arm out (its cache writes load the disk between runs)",
    )
    p.add_argument("--cold-only", action="store_true", help="one cold run per arm and round")
    p.add_argument("--baseline-python", default=None, help="ours under another installation")
    p.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "ca-warm-import")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    hide_broken_torchvision(args.work)
    formats = [] if args.formats == "none" else args.formats.split(",")
    models = prepare_models(args.preset, formats, args.work)
    arms = {"ours": sys.executable}
    if not args.no_openvino:
        arms["openvino"] = sys.executable
    if args.baseline_python:
        arms["baseline"] = args.baseline_python
    report = {}
    for label, model in models.items():
        print(f"\n== {label}: {model} ==", flush=True)
        report[label] = measure(model, arms, args)
    print()
    for label, res in report.items():
        print_model(label, res)
    if args.json:
        write_result(args.json, "warm_import_vs_ov_cache", report, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
