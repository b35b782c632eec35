"""`compile-ahead campaign run` refuses a bad campaign in one line before writing anything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from campaign_helpers import TINY_COMPILE, sleep_spec
from cli import run_cli

from compile_ahead.commands.ab import check_cell
from compile_ahead.errors import CompileAheadError
from compile_ahead.profiling.campaigns.definition.spec import load_spec
from compile_ahead.profiling.campaigns.definition.validation.arms import parse_campaign_arm
from compile_ahead.profiling.trials.design import make_plan


def campaign(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_cli("campaign", *argv, cwd=cwd)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: s.replace("[axes]", "[axes]\nprecision = [\"f32\"]"),
         "unknown axis 'precision'; axes: model, synthetic_dtype, ladder, ov_config, batch"),
        (lambda s: s.replace("[axes]", "[axes]\nbatch = [1, 2]"),
         "axis batch is for schedule and baselines campaigns"),
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
         "options.no-such-flag is not a flag of `ab compile`"),
        (lambda s: s.replace('kind = "compile"', 'kind = "schedule"'),
         "ab schedule: --arms: a=current, b=current"),
        # an option is one of `ab`'s flags exactly: no abbreviation, no "=VALUE" in its name
        (lambda s: s + '\n[options]\nladde = "16,48"\n',
         "options.ladde is not a flag of `ab compile`: keys are its flag names exactly"),
        (lambda s: s + '\n[options]\nar = "C=current,NUM_STREAMS=1"\n',
         "options.ar is not a flag of `ab compile`"),
        (lambda s: s + '\n[options]\n"ladder=16,64" = true\n',
         "options.'ladder=16,64' is not the name of an `ab` flag"),
        (lambda s: s + '\n[options]\n"--repeat" = 2\n',
         "options.'--repeat' is not the name of an `ab` flag"),
        (lambda s: s + '\n[options]\nrepeat = 2\nREPEAT = 3\n',
         "options.REPEAT is not a flag of `ab compile`: keys are its flag names as `ab` "
         "spells them; write repeat"),
        (lambda s: s + '\n[options]\nir_dir = "x"\n', "options.ir_dir is set by the campaign"),
        (lambda s: s + '\n[options]\nbatch = 2\n', "options.batch is set by the campaign"),
        # [report] is checked as [campaign] is
        (lambda s: s + '\n[report]\nfoo = 1\n', "unknown key report.foo; keys: endpoints"),
        (lambda s: s + '\n[report]\nendpoints = ["nope"]\n',
         "report.endpoints: 'nope' is not an endpoint of this compile campaign's cells; they "
         "measure: compile_32, compile_64, compile_total,"),
        (lambda s: s + '\n[report]\nendpoints = ["compile_128", "compile_1024"]\n',
         "report.endpoints: 'compile_1024' is not an endpoint"),
        (lambda s: s + '\n[report]\nendpoints = ["pass_self_total"]\n',
         "'pass_self_total' is not an endpoint"),  # measured with pass-profile only
        # names with control or bidi characters never reach the terminal or a heading
        (lambda s: s.replace("[campaign]", '[campaign]\nname = "evil\\nname"'),
         "campaign.name holds a control or format character (U+000A) in 'evil\\\\nname'"),
        (lambda s: s.replace('model = ["tiny"]', 'model = ["tiny\\u202e"]'),
         "axes.model[0] holds a control or format character (U+202E)"),
        (lambda s: s.replace('"A=current"', '"A\\u2066=current"'),
         "campaign.arms[0] holds a control or format character (U+2066)"),
        (lambda s: s + '\n[options]\n"x\\u001b[31m" = true\n',
         "options.x\\x1b[31m holds a control or format character (U+001B)"),
        # compile properties are checked against the device before anything is written
        (lambda s: s.replace("[axes]", '[axes]\nov_config = [["FOO=bar"]]'),
         "ab compile: --arm A: FOO is not a property CPU supports"),
        (lambda s: s.replace('"B=current,INFERENCE_PRECISION_HINT=f32"', '"B=current,FOO=bar"'),
         "ab compile: --arm B: FOO is not a property CPU supports"),
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


def _one_line_refusal(spec: Path, cwd: Path) -> str:
    """The campaign's refusal: one line, exit 2, nothing but the spec in ``cwd``."""
    proc = campaign(["run", str(spec), "--store", str(cwd / "s.sqlite")], cwd)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert [p.name for p in cwd.iterdir()] == [spec.name]  # no store, no lock
    return lines[0]


def test_a_schedule_cells_properties_are_checked_before_anything_is_written(tmp_path: Path):
    spec = sleep_spec(tmp_path / "sched.toml", 0.1)
    spec.write_text(spec.read_text().replace("[axes]", '[axes]\nov_config = [[], ["FOO=bar"]]'))
    line = _one_line_refusal(spec, tmp_path)
    assert "ab schedule: --ov-config: FOO is not a property CPU supports" in line


def test_a_name_from_the_files_name_is_checked_and_shown_escaped(tmp_path: Path) -> None:
    spec = tmp_path / "odd\x1b[2J\u202ename.toml"
    spec.write_text(TINY_COMPILE)
    line = _one_line_refusal(spec, tmp_path)
    assert "the campaign's name 'odd\\x1b[2J\\u202ename' holds a control or format" in line
    assert "\x1b" not in line and "\u202e" not in line and "odd\\x1b[2J\\u202ename.toml" in line


@pytest.mark.parametrize(
    "text",
    ["", "  \n\t\n", "# a campaign, one day\n\n# [campaign]\n"],
    ids=["empty", "blank", "comments"],
)
def test_an_empty_spec_is_refused_as_empty(tmp_path: Path, text: str) -> None:
    """Not as the first key it lacks (``campaign.kind must be one of ...``)."""
    spec = tmp_path / "empty.toml"
    spec.write_text(text)
    line = _one_line_refusal(spec, tmp_path)
    assert line == (
        f"compile-ahead: error: {spec}: the campaign file is empty (no [campaign] table): it "
        "needs [campaign] (kind, pairs, arms) and [axes] (model = [...])"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[axes]\nmodel = ["tiny"]\n', "no [campaign] table: it gives kind, pairs and arms"),
        ('kind = "compile"\npairs = 2\n[axes]\nmodel = ["tiny"]\n',
         "kind is outside any table: keys go under [campaign], [axes], [options] or [report]"),
    ],
)  # fmt: skip
def test_a_spec_without_its_campaign_table_says_so(tmp_path: Path, text: str, message: str):
    spec = tmp_path / "headless.toml"
    spec.write_text(text)
    assert f"{spec}: {message}" in _one_line_refusal(spec, tmp_path)


@pytest.mark.parametrize(
    ("endpoints", "known"),
    [('["critical_path", "tok_s_128", "nope"]', "'nope' is not an endpoint of this schedule"),
     ('["compile_64"]', "'compile_64' is not an endpoint of this schedule")],
)  # fmt: skip
def test_report_endpoints_of_a_schedule_campaign(tmp_path: Path, endpoints: str, known: str):
    spec = sleep_spec(tmp_path / "sched.toml", 0.1)
    spec.write_text(spec.read_text() + f"\n[report]\nendpoints = {endpoints}\n")
    assert known in _one_line_refusal(spec, tmp_path)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ("[0]", "axis batch must be in 1..4096 (sequences stepped together), got 0"),
        ("[-1]", "axis batch must be in 1..4096 (sequences stepped together), got -1"),
        ('["four"]', 'axis batch takes integers in 1..4096 (sequences per trial, e.g. [1, 2, 4, '
                     '8]), got "four"'),
        ("[1, 1.5]", "axis batch takes integers in 1..4096 (sequences per trial, e.g. [1, 2, 4, "
                     "8]), got 1.5"),
        ("[true]", "axis batch takes integers in 1..4096 (sequences per trial, e.g. [1, 2, 4, "
                   "8]), got true"),
        ("[]", "axis batch is empty: the grid has no cell"),
        ("[2, 2]", "axis batch names a value twice"),
        ("4", "axis batch must be a list of values"),
    ],
)  # fmt: skip
def test_bad_batch_axis_one_line_nothing_written(tmp_path: Path, values: str, message: str):
    spec = sleep_spec(tmp_path / "sched.toml", 0.1)
    spec.write_text(spec.read_text().replace("[axes]", f"[axes]\nbatch = {values}"))
    assert message in _one_line_refusal(spec, tmp_path)


def test_a_batch_axis_gives_each_cell_its_batch(tmp_path: Path) -> None:
    spec_path = sleep_spec(tmp_path / "sched.toml", 0.1)
    spec_path.write_text(spec_path.read_text().replace("[axes]", "[axes]\nbatch = [1, 4]"))
    spec = load_spec(spec_path, check_cell)
    assert [c.label for c in spec.cells] == [
        "model=tiny, ladder=64,128, batch=1",
        "model=tiny, ladder=64,128, batch=4",
        "model=tiny, ladder=128,256, batch=1",
        "model=tiny, ladder=128,256, batch=4",
    ]
    assert spec.cells[1].dirname == "cell01-tiny_64-128_4"
    assert spec.cells[1].argv[:8] == (
        "ab", "schedule", "--model", "tiny", "--ladder", "64,128", "--batch", "4",
    )  # fmt: skip
    assert spec.canonical["axes"]["batch"] == [1, 4]


def test_a_spec_without_the_batch_axis_keeps_its_identity() -> None:
    """Cells, their directories and the digest a store was made with, as before the axis."""
    spec = load_spec(Path(__file__).parents[1] / "campaigns/seed_generality_quick.toml", check_cell)
    assert spec.digest == "5611698fddb93156"
    assert spec.cells[0].dirname == "cell00-qwen2.5-0.5b_bf16_128-256-512"
    assert spec.cells[0].label == "model=qwen2.5-0.5b, synthetic_dtype=bf16, ladder=128,256,512"
    assert "--batch" not in spec.cells[0].argv and "batch" not in spec.canonical["axes"]


def test_report_endpoints_of_a_batch_campaign(tmp_path: Path) -> None:
    spec_path = sleep_spec(tmp_path / "sched.toml", 0.1)
    text = spec_path.read_text() + '\n[report]\nendpoints = ["batch_tok_s", "step_time"]\n'
    spec_path.write_text(text)
    assert "'batch_tok_s' is not an endpoint" in _one_line_refusal(spec_path, tmp_path)
    spec_path.write_text(text.replace("[axes]", "[axes]\nbatch = [1, 2]"))
    assert load_spec(spec_path, check_cell).report_endpoints == ("batch_tok_s", "step_time")


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


def test_an_arms_relative_paths_are_where_the_campaign_runs(tmp_path: Path, monkeypatch) -> None:
    """A block runs in its own directory: an arm's relative paths reach it made absolute."""
    (tmp_path / "cfg.json").write_text('{"CPU": {"NUM_STREAMS": "1"}}')
    monkeypatch.chdir(tmp_path)
    arm = parse_campaign_arm("B=current,config=cfg.json,NUM_STREAMS=1", "spec")
    assert arm.ab_spec(str) == f"B=current,config={tmp_path / 'cfg.json'},NUM_STREAMS=1"


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
