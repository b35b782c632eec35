"""A campaign's `[options]` through `compile-ahead campaign run`: a key is one of `ab KIND`'s
flag names exactly, and a value becomes the flags `ab` reads as the spec means them (a list
joined for a flag taking a comma-separated list, one flag per item for a flag that repeats,
refused for a flag that takes one value); every refusal is one line before anything is
written."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from campaign_helpers import TINY_COMPILE, connect
from cli import run_cli
from sleep_trial import campaign_toml

from compile_ahead.commands.ab import check_cell
from compile_ahead.commands.flag_table import parser_flags
from compile_ahead.commands.parsers import ExactParser
from compile_ahead.errors import CompileAheadError
from compile_ahead.profiling.campaigns.definition.spec import load_spec
from compile_ahead.profiling.campaigns.definition.validation import spec_text
from compile_ahead.profiling.campaigns.definition.validation.ab_flags import Takes

REFUSED_WITHIN_S = 120.0  # a refusal reads the spec and `ab`'s parser: seconds, even under load


def _sleepers(path: Path, options: str, batch: int | None = None) -> Path:
    """A one-cell, one-pair schedule campaign of sleeping trials, with these `[options]` lines
    (the table already holds the trial's ``command``)."""
    text = campaign_toml(0.1, cells=1, pairs=1) + options
    if batch is not None:
        text = text.replace("[axes]", f"[axes]\nbatch = [{batch}]")
    path.write_text(text)
    return path


def _campaign_run(spec: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    store = cwd / "s.sqlite"
    return run_cli("campaign", "run", spec, "--store", store, cwd=cwd, timeout=REFUSED_WITHIN_S)


def _refusal(spec: Path, cwd: Path) -> str:
    """The campaign's refusal: exit 2, one line, nothing but the spec in ``cwd`` (no store, no
    lock, no blocks folder)."""
    proc = _campaign_run(spec, cwd)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("compile-ahead: error: ") and str(spec) in lines[0]
    assert [p.name for p in cwd.iterdir()] == [spec.name]
    return lines[0]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ("decode-tokens = [20, 30]\n",
         "options.decode-tokens is a list, but --decode-tokens takes one value: give one"),
        ('device = ["CPU", "CPU"]\n', "options.device is a list, but --device takes one value"),
        ('prefill-shape = ["paged"]\n', "options.prefill-shape is a list, but --prefill-shape"),
    ],
)  # fmt: skip
def test_a_list_for_a_flag_that_takes_one_value_is_refused(tmp_path, options, message):
    """argparse keeps the last of a flag given twice: a list would run its last item only."""
    assert message in _refusal(_sleepers(tmp_path / "c.toml", options), tmp_path)


def test_a_prompt_len_list_is_one_length_per_sequence(tmp_path: Path) -> None:
    """``prompt-len = [8, 12]`` is ``--prompt-len 8,12``: the batch's two sequences have
    prompts of 8 and 12 tokens (not two prompts around 12, the last of two flags)."""
    spec = _sleepers(tmp_path / "c.toml", "prompt-len = [8, 12]\ndecode-tokens = 20\n", batch=2)
    proc = _campaign_run(spec, tmp_path)
    assert proc.returncode == 0, proc.stderr
    with connect(tmp_path / "s.sqlite") as conn:
        (command, experiment), *others = conn.execute(
            "SELECT command, experiment FROM blocks WHERE status = 'done'"
        ).fetchall()
    assert not others
    assert "--prompt-len=8,12" in command and "--prompt-len=8 " not in command, command
    assert json.loads(experiment)["prompt_lens"] == [8, 12]


def test_a_prompt_len_list_is_checked_against_the_batch(tmp_path: Path) -> None:
    """Two lengths are two sequences: a cell at B = 4 is refused by `ab`'s own check."""
    spec = _sleepers(tmp_path / "c.toml", "prompt-len = [8, 12]\n", batch=4)
    line = _refusal(spec, tmp_path)
    assert "cell model=tiny, ladder=64,128, batch=4: ab schedule: --batch 4 needs one " in line
    assert "--prompt-len per sequence, got 2 (8,12)" in line


def test_an_empty_list_for_a_comma_list_flag_is_refused(tmp_path: Path) -> None:
    line = _refusal(_sleepers(tmp_path / "c.toml", "prompt-len = []\n"), tmp_path)
    assert "options.prompt-len is an empty list: give a value or remove it" in line


@pytest.mark.parametrize(
    ("options", "message"),
    [
        # `ab`'s spelling, not the Namespace's
        ("prompt_len = 64\n", "options.prompt_len is not a flag of `ab schedule`: keys are its "
         "flag names as `ab` spells them; write prompt-len"),
        ("decode_tokens = 20\n", "write decode-tokens"),
        ("Prompt-Len = 64\n", "options.Prompt-Len is not a flag of `ab schedule`"),
        # a prefix of a flag is no flag, however unambiguous
        ("prompt = 64\n", "options.prompt is not a flag of `ab schedule`: keys are its flag "
         "names exactly; did you mean prompt-len?"),
        ("decode = 20\n", "options.decode is not a flag of `ab schedule`"),
        ("no-such-flag = true\n", "options.no-such-flag is not a flag of `ab schedule`: keys "
         "are its flag names exactly"),
        # a compile flag is no schedule flag
        ("pass-profile = true\n", "options.pass-profile is not a flag of `ab schedule`"),
    ],
)  # fmt: skip
def test_an_options_key_is_an_ab_flag_name_exactly(tmp_path: Path, options: str, message: str):
    assert message in _refusal(_sleepers(tmp_path / "c.toml", options), tmp_path)


def test_a_flags_names_and_how_it_takes_its_value_are_read_from_its_parser() -> None:
    parser = ExactParser()
    parser.add_argument("--decode-tokens", "--max-new-tokens", type=int)
    parser.add_argument("--prompt-len", metavar="P[,P...]")
    parser.add_argument("--pin", metavar="CPUS")
    parser.add_argument("--shape", action="append")
    parser.add_argument("--tag", action="extend", nargs="+")
    parser.add_argument("--quiet", action="store_true")
    flags = parser_flags(parser)
    assert {name: (f.dest, f.takes) for name, f in flags.items()} == {
        "help": ("help", Takes.NOTHING),
        "decode-tokens": ("decode_tokens", Takes.ONE),
        "max-new-tokens": ("decode_tokens", Takes.ONE),
        "prompt-len": ("prompt_len", Takes.COMMA_LIST),
        "pin": ("pin", Takes.ONE),
        "shape": ("shape", Takes.REPEATED),
        "tag": ("tag", Takes.REPEATED),
        "quiet": ("quiet", Takes.NOTHING),
    }


def test_two_names_of_one_flag_are_refused() -> None:
    """An alias is the flag by another name: two keys for it would keep the last value."""
    parser = ExactParser()
    parser.add_argument("--decode-tokens", "--max-new-tokens", type=int)
    known = parser_flags(parser)
    options = {"decode-tokens": 20, "max-new-tokens": 30}
    with pytest.raises(CompileAheadError) as refused:
        spec_text.option_flags(options, "schedule", known, Path("c.toml"))
    assert (
        str(refused.value)
        == "c.toml: options.decode-tokens and options.max-new-tokens are one flag"
    )
    assert spec_text.option_flags({"max-new-tokens": 30}, "schedule", known, Path("c.toml")) == [
        "--max-new-tokens=30"
    ]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ("pass-profile = 1\n",
         "options.pass-profile: --pass-profile is a switch: write pass-profile = true"),
        ('counters = "yes"\n', "options.counters: --counters is a switch"),
        ("repeat = true\n",
         "options.repeat must be a string or a number (--repeat takes one value)"),
        ('shape = ["x=[1]", false]\n',
         "options.shape[1] must be a string or a number (--shape takes a value each time it "
         "is given)"),
    ],
)  # fmt: skip
def test_a_value_of_the_wrong_kind_for_its_flag_is_refused(tmp_path, options, message):
    spec = tmp_path / "c.toml"
    spec.write_text(TINY_COMPILE + "\n[options]\n" + options)
    assert message in _refusal(spec, tmp_path)


def test_a_list_for_a_flag_that_repeats_gives_the_flag_per_item(tmp_path: Path) -> None:
    spec_path = tmp_path / "c.toml"
    options = '\n[options]\nshape = ["a=[1,2]", "b=[3]"]\npass-profile = false\nrepeat = 2\n'
    spec_path.write_text(TINY_COMPILE + options)
    argv = load_spec(spec_path, check_cell).cells[0].argv
    assert argv[-3:] == ("--shape=a=[1,2]", "--shape=b=[3]", "--repeat=2")
