"""Processes start fast: building either console script's parser, and every command's
`--help`, loads none of the heavy libraries (numpy, scipy, matplotlib, OpenVINO, torch,
transformers, Ray, Perfetto's); a run loads OpenVINO, and still neither scipy nor matplotlib.

Each check runs in a fresh process, since this one has loaded everything. A failure names the
libraries loaded; `python -X importtime -c "from compile_ahead.commands.main import
build_parser; build_parser()"` shows which import brought each in.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cli import TIMEOUT_S

HEAVY = ("numpy", "scipy", "matplotlib", "openvino", "torch", "transformers", "ray", "perfetto")
RUN_HEAVY = ("scipy", "matplotlib")  # a run needs numpy and OpenVINO, not these
PARSERS = ("compile_ahead.commands.main", "compile_ahead.commands.profile_compile")

# In the child: build the parser, print every command's --help, then name the top-level
# modules loaded and the command paths walked.
HELP_CHILD = """
import argparse, contextlib, io, json, sys
from {module} import build_parser

def walk(parser, path):
    yield path
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from walk(child, [*path, name])

parser = build_parser()
paths = list(walk(parser, []))
for path in paths:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        parser.parse_args([*path, "--help"])
print(json.dumps({{"modules": sorted(sys.modules), "paths": paths}}))
"""

# In the child: one `compile-ahead ARGV...`, then the modules loaded (the last line printed).
RUN_CHILD = """
import json, sys
from compile_ahead.commands.main import main
from compile_ahead.commands.running import exit_process

code = main(sys.argv[1:])
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
exit_process(code)
"""


def child(code: str, *argv: str) -> Any:
    """Run ``code`` in a fresh interpreter; the JSON value its last line of output prints."""
    done = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def loaded(modules: list[str], names: tuple[str, ...]) -> list[str]:
    """Which of the libraries ``names`` (top-level packages) are among ``modules``."""
    tops = {m.partition(".")[0] for m in modules}
    return sorted(set(names) & tops)


# Commands each parser must have walked (profile-compile has no subcommands).
WALKED = {PARSERS[0]: [["run"], ["generate"], ["ab", "compile"], ["campaign", "run"]]}


@pytest.mark.parametrize("module", PARSERS)
def test_building_the_parser_and_every_help_loads_no_heavy_library(module: str) -> None:
    found = child(HELP_CHILD.format(module=module))
    for path in [[], *WALKED.get(module, [])]:
        assert path in found["paths"]
    assert loaded(found["modules"], HEAVY) == [], f"{module}: building its parser loads these"


def test_the_check_sees_a_heavy_library() -> None:
    modules = child("import json, sys, numpy\nprint(json.dumps(sorted(sys.modules)))")
    assert loaded(modules, HEAVY) == ["numpy"]


@pytest.mark.slow
def test_a_warm_run_loads_no_scipy_or_matplotlib(tmp_path: Path) -> None:
    argv = ["run", "--model", "tiny", "--ladder", "16,32", "--decode-tokens", "4"]
    argv += ["--no-progress", "--cache-dir", str(tmp_path / "cache")]
    assert child(RUN_CHILD, *argv)["code"] == 0  # fills the compile cache
    warm = child(RUN_CHILD, *argv)
    assert warm["code"] == 0
    assert "openvino" in loaded(warm["modules"], HEAVY)  # it did run a graph
    assert loaded(warm["modules"], RUN_HEAVY) == [], "a run loads these"
