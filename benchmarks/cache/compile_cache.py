"""Compile figures with weights on disk, and the compile cache, for one preset.

Prints, measured side by side in one process (timings on a shared VM drift, so variants are
interleaved and reported as per-rung ratios):
  - compile_model per rung: the synthetic preset (a checkpoint in the user cache since
    synthetic weights are written once) against a transformers random-init checkpoint of the
    same shapes saved with save_pretrained; target preset / checkpoint <= 1.15, AB/BA order;
  - per rung, cold (compile + export + write) against warm (import from the cache);
  - a decode step on an imported rung against the same rung compiled;
  - OpenVINO's own CACHE_DIR on our in-memory graphs: whether a rebuilt graph hits, and what
    hashing the graph costs;
  - a weightless entry (CACHE_MODE=OPTIMIZE_SIZE): size and import time against a full one,
    for our in-memory graph and for the same rung read from IR;
  - split mode: the weight parts and one attention core, cold against warm.

    python benchmarks/cache/compile_cache.py [--preset qwen2.5-0.5b] [--ladder 1024,2048,4096,8192]
        [--rounds 2] [--work DIR] [--json out.json]

The checkpoint is written to --work (default: a directory in the system temp dir) once and
reused; the synthetic preset comes from the user cache (COMPILE_AHEAD_CACHE_DIR to move it).
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _shared
from _shared.common import median, orders, ratio, round_order
from _shared.models import hf_checkpoint
from _shared.results import write_result

from compile_ahead.runtime.base.ov_core import core
from compile_ahead.runtime.compile.cache.store import CompileCache
from compile_ahead.runtime.compile.graph.split_step import WeightParts, compile_attention_core
from compile_ahead.runtime.compile.graph.step_compile import compile_step
from compile_ahead.runtime.compile.settings.options import CompileOptions, device_config
from compile_ahead.runtime.graphs.decoder import build_step_model
from compile_ahead.runtime.graphs.decompression import mark_weight_decompression
from compile_ahead.runtime.graphs.spec import GraphSpec
from compile_ahead.runtime.model.architecture import ModelConfig
from compile_ahead.runtime.model.kv_arena import KVArena
from compile_ahead.runtime.model.presets import PRESETS
from compile_ahead.runtime.sources.resolve import load_checkpoint, synthetic_model


def preset_vs_checkpoint(preset, ckpt, ladder, rounds, options) -> dict:
    """compile_model seconds per rung, AB/BA alternated per rung and round."""
    times: dict[str, dict[int, list[float]]] = {"preset": {}, "checkpoint": {}}
    arms = [("preset", preset), ("checkpoint", ckpt)]
    for r in range(rounds):
        for i, c in enumerate(ladder):  # each rung's pair one block further in the design
            spec = GraphSpec(c, 1, options.kv_precision)
            for name, source in round_order(arms, r + i):
                result = compile_step(source, spec, options)
                times[name].setdefault(c, []).append(result.compile_s)
                print(f"  round {r + 1} C={c} {name:10s} compile {result.compile_s:6.2f} s")
                del result
                gc.collect()
    rows = [
        {
            "capacity": c,
            "preset_s": times["preset"][c],
            "checkpoint_s": times["checkpoint"][c],
            "ratio": ratio(times["checkpoint"][c], times["preset"][c]),
        }
        for c in ladder
    ]
    every = {name: [t for c in ladder for t in times[name][c]] for name in times}
    return {"rows": rows, "ratio_geomean": ratio(every["checkpoint"], every["preset"])}


def decode_ms(step, cfg: ModelConfig, capacity: int, kv: str, steps: int = 12) -> float:
    arena = KVArena(cfg, capacity, kv)
    step.bind(arena)
    ids = np.array([11])
    step.run(ids, 100)
    t0 = time.perf_counter()
    for t in range(steps):
        step.run(ids, 101 + t)
    return 1000 * (time.perf_counter() - t0) / steps


def cold_vs_warm(source, ladder, rounds, options, work: Path) -> dict:
    """Per rung: a miss (compile, export, write) then a hit (import), in a fresh cache per
    round; then a decode step on the imported rung against the compiled one."""
    rows: dict[int, dict[str, list[float]]] = {
        c: {"compile_s": [], "store_s": [], "import_s": [], "entry_mb": []} for c in ladder
    }
    decode: dict[str, list[float]] = {"compiled_ms": [], "imported_ms": []}
    for r in range(rounds):
        cache_dir = work / f"compiled-round{r}"
        shutil.rmtree(cache_dir, ignore_errors=True)
        cached = replace(options, cache=CompileCache(cache_dir))
        for c in ladder:
            spec = GraphSpec(c, 1, options.kv_precision)
            cold = compile_step(source, spec, cached)
            assert cold.cache.state == "miss", cold.cache
            entry = cold.cache.entry
            warm = compile_step(source, spec, cached)
            assert warm.cache.state == "hit", warm.cache
            row = rows[c]
            row["compile_s"].append(cold.compile_s)
            row["store_s"].append(cold.cache.store_s)
            row["import_s"].append(warm.import_s)
            row["entry_mb"].append(entry.stat().st_size / 1e6 if entry else float("nan"))
            print(
                f"  round {r + 1} C={c} cold compile {cold.compile_s:6.2f} s + store "
                f"{cold.cache.store_s:5.2f} s | warm import {warm.import_s:5.2f} s"
            )
            if c == ladder[0]:
                pair = {"compiled_ms": cold.step, "imported_ms": warm.step}
                for name in round_order(list(pair), r):
                    step = pair[name]
                    decode[name].append(decode_ms(step, source.config, c, options.kv_precision))
            del cold, warm
            gc.collect()
        shutil.rmtree(cache_dir, ignore_errors=True)
    out = [
        {
            "capacity": c,
            **rows[c],
            "warm_over_cold": ratio(rows[c]["compile_s"], rows[c]["import_s"]),
        }
        for c in ladder
    ]
    return {"rows": out, "decode_first_rung": decode}


def mechanisms(ckpt_dir: Path, capacity: int, options, rounds: int, work: Path) -> dict:
    """Our export/import cache against OpenVINO's CACHE_DIR at one rung, interleaved. Miss:
    build + compile + write. Hit: on a graph source opened afresh (what a new process does);
    CACHE_DIR needs the graph built and hashes all of it, weights included, on every call."""
    spec = GraphSpec(capacity, 1, options.kv_precision)
    config = device_config(options)
    res: dict = {"ours": {"miss_s": [], "hit_s": []}, "cache_dir": {"miss_s": [], "hit_s": []}}
    res["cache_dir"]["loaded_from_cache"] = []
    for r, order in orders(["ours", "cache_dir"], rounds):
        for mech in order:
            directory = work / f"mechanism-{mech}"
            shutil.rmtree(directory, ignore_errors=True)
            if mech == "ours":
                opts = replace(options, cache=CompileCache(directory))
                cold = compile_step(load_checkpoint(ckpt_dir), spec, opts)
                miss = cold.build_s + cold.compile_s + cold.cache.store_s
                del cold
                gc.collect()
                hit = compile_step(load_checkpoint(ckpt_dir), spec, opts).import_s
            else:
                with_dir = {**config, "CACHE_DIR": str(directory)}
                t0 = time.perf_counter()
                src = load_checkpoint(ckpt_dir)
                model = build_step_model(src.config, src.weights, spec)
                compiled = core().compile_model(model, options.device, with_dir)
                miss = time.perf_counter() - t0
                del compiled, model, src
                gc.collect()
                t0 = time.perf_counter()
                src = load_checkpoint(ckpt_dir)
                model = build_step_model(src.config, src.weights, spec)
                compiled = core().compile_model(model, options.device, with_dir)
                hit = time.perf_counter() - t0
                res[mech]["loaded_from_cache"].append(
                    bool(compiled.get_property("LOADED_FROM_CACHE"))
                )
                del compiled, model, src
            res[mech]["miss_s"].append(miss)
            res[mech]["hit_s"].append(hit)
            print(f"  round {r + 1} {mech:9s} miss {miss:6.2f} s  hit {hit:5.2f} s", flush=True)
            gc.collect()
            shutil.rmtree(directory, ignore_errors=True)
    return res


def weightless(source, capacity, options, work: Path) -> dict:
    spec = GraphSpec(capacity, 1, options.kv_precision)
    out = {}
    for name, cache in (
        ("full", CompileCache(work / "full")),
        ("weightless", CompileCache(work / "weightless", weightless=True)),
    ):
        shutil.rmtree(cache.directory, ignore_errors=True)
        opts = replace(options, cache=cache)
        cold = compile_step(source, spec, opts)
        entry = cold.cache.entry
        del cold
        gc.collect()
        warm = compile_step(source, spec, opts)
        out[name] = {
            "entry_mb": entry.stat().st_size / 1e6 if entry else None,
            "import_s": warm.import_s,
            "state": warm.cache.state,
        }
        del warm
        gc.collect()
        shutil.rmtree(cache.directory, ignore_errors=True)
    return out


def weightless_ir(source, capacity, options, work: Path) -> dict:
    """The same rung saved as IR and read back (weights then come from the .bin): the CPU
    plugin's weightless export, size and import time (weights restored from the .bin)."""
    import io

    import openvino as ov

    spec = GraphSpec(capacity, 1, options.kv_precision)
    xml = work / "weightless-ir" / "rung.xml"
    xml.parent.mkdir(parents=True, exist_ok=True)
    ov.save_model(build_step_model(source.config, source.weights, spec), xml, False)
    model = core().read_model(xml)
    mark_weight_decompression(model)  # save_model drops the decompression marks
    config = device_config(options)
    out = {}
    for name, extra in (("full", {}), ("weightless", {"CACHE_MODE": "OPTIMIZE_SIZE"})):
        compiled = core().compile_model(model, options.device, {**config, **extra})
        buffer = io.BytesIO()
        compiled.export_model(buffer)
        del compiled
        blob = buffer.getvalue()
        t0 = time.perf_counter()
        imported = core().import_model(
            blob, options.device, {**config, **extra, "WEIGHTS_PATH": str(xml.with_suffix(".bin"))}
        )
        out[name] = {"blob_mb": len(blob) / 1e6, "import_s": time.perf_counter() - t0}
        del imported, blob, buffer
        gc.collect()
    out["bin_mb"] = xml.with_suffix(".bin").stat().st_size / 1e6
    shutil.rmtree(xml.parent, ignore_errors=True)
    return out


def split_cold_warm(source, capacity, options, work: Path) -> dict:
    cache = CompileCache(work / "split")
    shutil.rmtree(cache.directory, ignore_errors=True)
    opts = replace(options, cache=cache)
    spec = GraphSpec(capacity, 1, options.kv_precision)
    out = {}
    for phase in ("cold", "warm"):
        parts = WeightParts(source, opts)
        t0 = time.perf_counter()
        core_step = compile_attention_core(parts, spec, opts)
        core_s = time.perf_counter() - t0
        out[phase] = {
            "weight_parts_s": parts.compile_s,
            "weight_parts_cache": parts.cache_state,
            "attention_core_s": core_s,
            "attention_core_cache": core_step.cache.state,
        }
        del parts, core_step
        gc.collect()
    shutil.rmtree(cache.directory, ignore_errors=True)
    return out


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="qwen2.5-0.5b", choices=sorted(PRESETS))
    p.add_argument("--ladder", default="1024,2048,4096,8192")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--checkpoint-dtype", default="f16", choices=("f16", "bf16", "f32"))
    p.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "ca-cache-bench")
    p.add_argument("--skip-split", action="store_true")
    p.add_argument("--json", type=Path, default=None, help="also write the report here (JSON)")
    return p.parse_args()


def print_preset_vs_checkpoint(pvc: dict) -> None:
    for row in pvc["rows"]:
        print(
            f"  C={row['capacity']:6d} preset {median(row['preset_s']):5.2f} s  checkpoint "
            f"{median(row['checkpoint_s']):5.2f} s  ratio {row['ratio']:.3f}"
        )
    print(f"  preset / checkpoint, geometric mean: {pvc['ratio_geomean']:.3f} (target <= 1.15)")


def print_cold_vs_warm(cvw: dict, first_rung: int) -> None:
    for row in cvw["rows"]:
        print(
            f"  C={row['capacity']:6d} compile {median(row['compile_s']):5.2f} s  store "
            f"{median(row['store_s']):5.2f} s  import {median(row['import_s']):5.2f} s  "
            f"entry {median(row['entry_mb']):.0f} MB  warm/cold {row['warm_over_cold']:.3f}"
        )
    dec = cvw["decode_first_rung"]
    print(
        f"  decode at C={first_rung}: compiled {median(dec['compiled_ms']):.1f} ms, imported "
        f"{median(dec['imported_ms']):.1f} ms per step"
    )


def print_mechanisms(mech: dict) -> None:
    for name in ("ours", "cache_dir"):
        print(
            f"  {name:9s} miss {median(mech[name]['miss_s']):5.2f} s  "
            f"hit {median(mech[name]['hit_s']):5.2f} s"
        )
    print(f"  CACHE_DIR loaded from cache: {mech['cache_dir']['loaded_from_cache']}")


def main() -> int:
    args = parse_args()
    ladder = [int(x) for x in args.ladder.split(",")]
    args.work.mkdir(parents=True, exist_ok=True)

    t0 = time.perf_counter()
    preset = synthetic_model(args.preset)
    print(f"preset: {preset.label} (resolve {time.perf_counter() - t0:.1f} s)")
    print(f"  {preset.describe()}")
    ckpt_dir = args.work / f"{args.preset}-hf-{args.checkpoint_dtype}"
    hf_checkpoint(preset.config, ckpt_dir, args.checkpoint_dtype)
    ckpt = load_checkpoint(ckpt_dir)
    print(f"checkpoint: {ckpt.label}")
    options = CompileOptions("CPU").resolved()
    print(f"device CPU, inference precision {options.inference_precision}, ladder {ladder}")
    # The first compile in a process pays one-time plugin start-up: keep it out of the table.
    warmup = compile_step(ckpt, GraphSpec(16, 1, options.kv_precision), options)
    del warmup

    report: dict = {"preset": preset.describe(), "checkpoint": ckpt.describe(), "ladder": ladder}
    print("\n== compile_model per rung: synthetic preset vs transformers checkpoint ==")
    report["preset_vs_checkpoint"] = preset_vs_checkpoint(
        preset, ckpt, ladder, args.rounds, options
    )
    print_preset_vs_checkpoint(report["preset_vs_checkpoint"])
    print("\n== compile cache: cold (compile + store) vs warm (import), preset ==")
    report["cold_vs_warm"] = cold_vs_warm(preset, ladder, args.rounds, options, args.work)
    print_cold_vs_warm(report["cold_vs_warm"], ladder[0])
    print("\n== mechanisms: export/import vs OpenVINO CACHE_DIR (checkpoint, first rung) ==")
    report["mechanisms"] = mechanisms(ckpt_dir, ladder[0], options, args.rounds, args.work)
    print_mechanisms(report["mechanisms"])
    print("\n== weightless entry (CACHE_MODE=OPTIMIZE_SIZE), preset, first rung ==")
    report["weightless"] = weightless(preset, ladder[0], options, args.work)
    print(f"  {json.dumps(report['weightless'])}")
    print("\n== weightless export of the same rung read from IR (checkpoint, first rung) ==")
    report["weightless_ir"] = weightless_ir(ckpt, ladder[0], options, args.work)
    print(f"  {json.dumps(report['weightless_ir'])}")
    if not args.skip_split:
        print("\n== split: weight parts and one attention core, cold vs warm ==")
        report["split"] = split_cold_warm(preset, ladder[0], options, args.work)
        print(f"  {json.dumps(report['split'])}")
    if args.json:
        write_result(args.json, "compile_cache", report, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
