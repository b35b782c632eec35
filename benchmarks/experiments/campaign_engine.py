"""The campaign engine itself: Ray's overhead against the local executor, scaling over simulated
nodes, and resume after a SIGKILL. Trials only sleep (tests/sleep_trial.py), so
the CPU does not limit what is measured; run it on a quiet machine.

    python benchmarks/experiments/campaign_engine.py overhead [--repeats 3]  # local vs Ray
    python benchmarks/experiments/campaign_engine.py scaling [--nodes 1,2,4]  # wall per N nodes
    python benchmarks/experiments/campaign_engine.py resume      # SIGKILL at ~50%, rerun
    python benchmarks/experiments/campaign_engine.py all --out engine.json

Ray runs in a network namespace with only loopback when this machine allows one (root and
unshare), so its cluster never listens on the machine's own addresses; the script re-runs
itself there. Each figure is the wall time of one `compile-ahead campaign run` process.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))  # test-only helpers
from ray_testbed import (
    in_loopback_namespace,
    loopback_unavailable,
    start_cluster,
)
from sleep_trial import campaign_toml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _shared
from _shared.results import write_result

IN_NAMESPACE = "CAMPAIGN_ENGINE_IN_NAMESPACE"


def campaign(root: Path, name: str, args: argparse.Namespace) -> tuple[Path, Path]:
    spec = root / f"{name}.toml"
    spec.write_text(campaign_toml(args.seconds, args.cells, args.pairs, warmup=0))
    return spec, root / f"{name}.sqlite"


def run_command(spec: Path, store: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "compile_ahead.commands", "campaign", "run", str(spec),
            "--store", str(store), "--quiet", *extra]  # fmt: skip


def timed(argv: list[str], cwd: Path) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"campaign run failed: {proc.stderr.strip()[-2000:]}")
    return wall


def overhead(root: Path, args: argparse.Namespace) -> dict:
    """The same campaign on one node, local and Ray, alternating which goes first."""
    cluster = start_cluster(1)
    walls: dict[str, list[float]] = {"local": [], "ray": []}
    try:
        for r in range(args.repeats):
            order = ("local", "ray") if r % 2 == 0 else ("ray", "local")
            for executor in order:
                spec, store = campaign(root, f"overhead-{executor}-{r}", args)
                extra = (
                    ["--executor", "ray", "--address", cluster.address] if executor == "ray" else []
                )
                walls[executor].append(timed(run_command(spec, store, *extra), root))
    finally:
        cluster.shutdown()
    local, ray = (sorted(walls[k])[len(walls[k]) // 2] for k in ("local", "ray"))
    return {"walls_s": walls, "median_local_s": local, "median_ray_s": ray,
            "overhead_percent": 100.0 * (ray - local) / local}  # fmt: skip


def scaling(root: Path, args: argparse.Namespace) -> dict:
    """Campaign wall with N simulated nodes, and its efficiency against 1/N of one node's."""
    out: dict = {"blocks": args.cells * args.pairs, "walls_s": {}}
    for n in args.nodes:
        cluster = start_cluster(n)
        try:
            spec, store = campaign(root, f"scaling-{n}", args)
            extra = ["--executor", "ray", "--address", cluster.address]
            out["walls_s"][n] = timed(run_command(spec, store, *extra), root)
        finally:
            cluster.shutdown()
    base = out["walls_s"][args.nodes[0]] * args.nodes[0]
    out["efficiency"] = {n: base / (n * w) for n, w in out["walls_s"].items()}
    return out


def _done(store: Path) -> int:
    if not store.exists():
        return 0
    with sqlite3.connect(store) as conn:
        return conn.execute("SELECT COUNT(*) FROM blocks WHERE status = 'done'").fetchone()[0]


def resume(root: Path, args: argparse.Namespace) -> dict:
    """SIGKILL the coordinator once half the blocks are done; run again; count per block."""
    spec, store = campaign(root, "resume", args)
    total = args.cells * args.pairs
    proc = subprocess.Popen(run_command(spec, store), cwd=root, stderr=subprocess.DEVNULL)
    while _done(store) < total // 2 and proc.poll() is None:
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_at = _done(store)
    timed(run_command(spec, store), root)
    with sqlite3.connect(store) as conn:
        integrity = conn.execute("PRAGMA integrity_check").fetchone()[0]
        rows = conn.execute(
            "SELECT b.cell, b.block, SUM(b.status = 'done'), COUNT(*), "
            "(SELECT COUNT(*) FROM trials t JOIN blocks d ON d.id = t.block_id "
            " WHERE d.cell = b.cell AND d.block = b.block) FROM blocks b "
            "GROUP BY b.cell, b.block ORDER BY b.cell, b.block"
        ).fetchall()
    per_block = [{"cell": c, "block": b, "done_rows": d, "attempts": a, "trials_recorded": t}
                 for c, b, d, a, t in rows]  # fmt: skip
    return {
        "blocks": total, "done_when_killed": killed_at, "integrity": integrity,
        "every_block_done_once": all(r["done_rows"] == 1 for r in per_block)
        and len(per_block) == total,
        "trials_per_block": sorted({r["trials_recorded"] for r in per_block}),
        "blocks_interrupted_then_rerun": [r for r in per_block if r["attempts"] > 1],
        "per_block": per_block,
    }  # fmt: skip


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=("overhead", "scaling", "resume", "all"))
    p.add_argument("--seconds", type=float, default=10.0, help="each trial's sleep (default 10)")
    p.add_argument("--cells", type=int, default=4)
    p.add_argument("--pairs", type=int, default=2, help="blocks per cell (default 2)")
    p.add_argument("--repeats", type=int, default=3, help="overhead: runs of each executor")
    p.add_argument("--nodes", type=lambda t: [int(n) for n in t.split(",")], default=[1, 2, 4])
    p.add_argument("--out", type=Path, default=None, help="also write the figures as JSON")
    return p.parse_args()


def main() -> int:
    args = parse()
    if args.what != "resume" and os.environ.get(IN_NAMESPACE) != "1":
        reason = loopback_unavailable()
        if reason is None:
            env = os.environ | {IN_NAMESPACE: "1", "RAY_BACKEND_LOG_LEVEL": "error"}
            argv = in_loopback_namespace([sys.executable, __file__, *sys.argv[1:]])
            return subprocess.run(argv, env=env).returncode
        print(f"note: Ray listens on this machine's addresses ({reason})", file=sys.stderr)
    steps = {"overhead": overhead, "scaling": scaling, "resume": resume}
    chosen = list(steps) if args.what == "all" else [args.what]
    figures = {"settings": {k: v for k, v in vars(args).items() if k != "out"}}
    with tempfile.TemporaryDirectory(prefix="campaign-engine-") as tmp:
        os.environ["COMPILE_AHEAD_CACHE_DIR"] = str(Path(tmp) / "cache")  # the nodes' blocks
        for name in chosen:
            figures[name] = steps[name](Path(tmp), args)
            print(json.dumps({name: figures[name]}, indent=1, default=str), flush=True)
    if args.out is not None:
        write_result(args.out, "campaign_engine", figures, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
