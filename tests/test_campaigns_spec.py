"""`compile-ahead campaign run` refuses a bad campaign in one line before writing anything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from campaign_helpers import TINY_COMPILE

from compile_ahead.commands.ab import check_cell
from compile_ahead.errors import CompileAheadError
from compile_ahead.profiling.campaigns.arms import parse_campaign_arm
from compile_ahead.profiling.campaigns.spec import load_spec
from compile_ahead.profiling.trials.design import make_plan


def campaign(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "compile_ahead.commands", "campaign", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: s.replace("[axes]", "[axes]\nprecision = [\"f32\"]"),
         "unknown axis 'precision'; axes: model, synthetic_dtype, ladder, ov_config"),
        (lambda s: s.replace('ladder = ["32,64", "64,128"]', "ladder = []"),
         "axis ladder is empty: the grid has no cell"),
        (lambda s: s.replace('"A=current"', '"A=/no/such/python"'),
         "arm 'A=/no/such/python': '/no/such/python' is neither a release (openvino==X.Y.Z), an "
         "interpreter, venv or library directory that exists, nor current"),
        (lambda s: s.replace('"A=current"', '"openvino>=2025"'),
         "arm 'openvino>=2025': 'openvino>=2025' is not a release: write openvino==X.Y.Z"),
        (lambda s: s.replace('"A=current"', '"openvino==twenty"'),
         "'openvino==twenty' is not a release: write openvino==X.Y.Z"),
        (lambda s: s.replace('model = ["tiny"]', 'model = ["no-such-model"]'),
         "model no-such-model: not on this machine"),
        (lambda s: s.replace('ladder = ["32,64", "64,128"]', 'ladder = ["32,33"]'),
         "cell model=tiny, ladder=32,33: ab compile:"),
        (lambda s: s + '\n[options]\npairs = 3\n', "options.pairs is set by the campaign"),
        (lambda s: s + '\n[options]\nno-such-flag = true\n',
         "ab compile: unrecognized arguments: --no-such-flag"),
        (lambda s: s.replace('kind = "compile"', 'kind = "schedule"'),
         "ab schedule: --arms: a=current, b=current"),
    ],
)  # fmt: skip
def test_bad_campaign_one_line_nothing_written(tmp_path: Path, edit, message: str) -> None:
    spec = tmp_path / "bad.toml"
    spec.write_text(edit(TINY_COMPILE))
    proc = campaign(["run", str(spec), "--store", str(tmp_path / "s.sqlite")], tmp_path)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("compile-ahead: error: "), proc.stderr
    assert message in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.toml"]  # no store, no lock


def test_a_good_campaign_expands_to_its_cells(tmp_path: Path) -> None:
    spec_path = tmp_path / "good.toml"
    spec_path.write_text(
        TINY_COMPILE.replace(
            'model = ["tiny"]', 'model = ["tiny"]\nsynthetic_dtype = ["f16", "bf16"]'
        )
    )
    spec = load_spec(spec_path, check_cell)
    assert [c.label for c in spec.cells] == [
        "model=tiny, synthetic_dtype=f16, ladder=32,64",
        "model=tiny, synthetic_dtype=f16, ladder=64,128",
        "model=tiny, synthetic_dtype=bf16, ladder=32,64",
        "model=tiny, synthetic_dtype=bf16, ladder=64,128",
    ]
    assert spec.blocks == 8
    assert spec.cells[1].argv == (
        "ab", "compile", "--model", "tiny", "--synthetic-dtype", "f16", "--ladder", "64,128",
    )  # fmt: skip
    # the digest covers what defines the experiments, not the name
    renamed = tmp_path / "renamed.toml"
    renamed.write_text(spec_path.read_text().replace("[campaign]", '[campaign]\nname = "x"'))
    assert load_spec(renamed, check_cell).digest == spec.digest
    more = tmp_path / "more.toml"
    more.write_text(spec_path.read_text().replace("pairs = 2", "pairs = 3"))
    assert load_spec(more, check_cell).digest != spec.digest


def test_arms_by_version_interpreter_or_current(tmp_path: Path) -> None:
    arm = parse_campaign_arm("openvino==2025.4.1", "spec")
    assert (arm.name, arm.version) == ("ov2025.4.1", "2025.4.1")
    assert arm.ab_spec(lambda v: f"/envs/{v}/bin/python") == (
        "ov2025.4.1=python=/envs/2025.4.1/bin/python"
    )
    named = parse_campaign_arm("new=openvino==2026.4.1,INFERENCE_PRECISION_HINT=f32", "spec")
    assert named.ab_spec(lambda v: "/p") == "new=python=/p,INFERENCE_PRECISION_HINT=f32"
    assert parse_campaign_arm("current", "spec").name == "current"
    here = parse_campaign_arm(f"mine={sys.executable}", "spec")
    assert (here.name, here.version) == ("mine", None)
    with pytest.raises(CompileAheadError, match="give it a name"):
        parse_campaign_arm(sys.executable, "spec")
    with pytest.raises(CompileAheadError, match="names 2 installations"):
        parse_campaign_arm("x=openvino==2025.4.1,current", "spec")


@pytest.mark.parametrize("arms", [("A", "B"), ("A", "B", "C"), ("A", "B", "C", "D")])
def test_one_block_of_a_design_runs_in_the_designs_order(arms: tuple[str, ...]) -> None:
    """`ab --first-block B --pairs 1` (a campaign's block B) runs what block B of the whole
    design runs, and pooling the blocks in order gives the whole design."""
    whole = make_plan(arms, 12, 0)
    for first in range(12):
        assert make_plan(arms, 1, 0, first_block=first).blocks == whole.blocks[first : first + 1]
    assert make_plan(arms, 5, 1, first_block=3).blocks == whole.blocks[3:8]
    with pytest.raises(CompileAheadError, match="--first-block must be 0 or more"):
        make_plan(arms, 1, 0, first_block=-1)


@pytest.mark.parametrize(
    "spec_path", sorted((Path(__file__).parents[1] / "campaigns").glob("*.toml")), ids=str
)
def test_shipped_campaigns_load_as_a_cell_per_combination_of_their_axes(spec_path):
    """The campaigns the repo ships pass the same checks `campaign run` makes before it
    writes anything, with one cell for every combination of their axes."""
    import math
    import tomllib

    axes = tomllib.loads(spec_path.read_text())["axes"]
    spec = load_spec(spec_path, check_cell)
    assert len(spec.cells) == math.prod(len(values) for values in axes.values())
