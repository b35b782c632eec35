"""Compile A/B between two OpenVINO releases from PyPI, each in its own venv.

    python benchmarks/ab_compile_releases.py --release-a 2026.4.1 --release-b 2026.3.0 \
        --model qwen2.5-0.5b --ladder 1024,2048 --pairs 3

Creates VENV_ROOT/ov-<release> (python -m venv + pip install openvino==<release> numpy) when
missing, then runs `compile-ahead ab compile` with the two interpreters as arms A and B.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from compile_ahead.commands.main import main as cli_main


def ensure_venv(root: Path, release: str) -> Path:
    venv = root / f"ov-{release}"
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", f"openvino=={release}", "numpy"],
            check=True,
        )
    return python


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--release-a", default="2026.4.1")
    p.add_argument("--release-b", default="2026.3.0")
    p.add_argument("--venv-root", type=Path, default=Path("/tmp"))
    p.add_argument("--model", default="qwen2.5-0.5b")
    p.add_argument("--ladder", default="1024,2048")
    p.add_argument("--pairs", default="3")
    p.add_argument("--out", default="ab-results/compile-releases")
    p.add_argument("--pass-profile", action="store_true")
    args = p.parse_args()
    a = ensure_venv(args.venv_root, args.release_a)
    b = ensure_venv(args.venv_root, args.release_b)
    argv = ["ab", "compile", "--arm", f"A={a}", "--arm", f"B={b}", "--model", args.model,
            "--ladder", args.ladder, "--pairs", args.pairs, "--out", args.out]  # fmt: skip
    if args.pass_profile:
        argv.append("--pass-profile")
    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
