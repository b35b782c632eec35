"""Flags that contradict each other or the model are refused with one line that names the real
cause, before any work; none is silently ignored while a report says it chose."""

from __future__ import annotations

import json
import shutil

import pytest
from cli import run_cli

from compile_ahead.commands.main import main
from conftest import reference_greedy

PROMPT = [5, 17, 99, 3, 250]  # shorter than any device's threshold for a prefill graph


def _one_error(capsys) -> str:
    captured = capsys.readouterr()
    lines = [x for x in captured.err.splitlines() if x.strip()]
    assert len(lines) == 1, captured.err[-2000:]
    assert "model:" not in captured.err + captured.out  # refused before the model was opened
    return lines[0].removeprefix("compile-ahead: error: ")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--graph", "split", "--prefill-shape", "paged"], "--prefill-shape paged: --graph split"),
        (["--prefill-chunk", "1", "--prefill-shape", "static"], "--prefill-chunk 1 prefills"),
    ],
)
def test_a_prefill_shape_that_cannot_be_honoured_is_refused(flags, message, capsys):
    argv = ["run", "--model", "tiny", "--ladder", "tiny", "--no-progress", *flags]
    assert main(argv) == 2
    assert message in _one_error(capsys)


def test_a_prefill_shape_is_honoured_for_a_short_prompt(tiny_qwen2_dir, tmp_path, capsys):
    """--prefill-shape static with a prompt below the device's threshold for a prefill graph
    runs the static prefill graph (so the report's chosen_by: flag is true) and gives
    transformers' tokens."""
    ids = ",".join(map(str, PROMPT))
    common = ["--model", str(tiny_qwen2_dir), "--prompt-ids", ids, "--max-new-tokens", "4"]
    common += ["--inference-precision", "f32", "--no-cache", "--prefill-shape", "static"]
    report = tmp_path / "run.json"
    argv = ["run", *common, "--ladder", "tiny", "--no-progress", "--report", str(report)]
    assert main(argv) == 0
    rep = json.loads(report.read_text())
    assert (rep["prefill"]["path"], rep["prefill"]["chosen_by"]) == ("static", "flag")
    assert [j["chunk"] for j in rep["compile_jobs"] if j["chunk"] > 1] == [16]  # capped at 16
    capsys.readouterr()
    assert main(["generate", *common, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["prefill"]["path"], out["prefill"]["chosen_by"]) == ("static", "flag")
    assert out["sequences"][0]["tokens"] == reference_greedy(tiny_qwen2_dir, PROMPT, 4)[0]


def test_ladder_auto_below_one_rung_blames_the_model_not_the_prompt(
    tiny_qwen2_dir, tmp_path, capsys
):
    model = tmp_path / "model"
    shutil.copytree(tiny_qwen2_dir, model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 8}))
    argv = ["run", "--model", str(model), "--ladder", "auto", "--prompt-ids", "1,2"]
    assert main([*argv, "--no-progress", "--no-cache"]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "no rung that is a multiple of 16 fits the maximum context (8 tokens)" in line
    assert "prompt" not in line


def test_an_ab_arm_refuses_a_key_given_twice_as_ov_config_does(capsys):
    twice = ["INFERENCE_NUM_THREADS=1", "INFERENCE_NUM_THREADS=2"]
    run = ["run", "--model", "tiny", "--ladder", "tiny", "--no-progress"]
    assert main([*run, "--ov-config", twice[0], "--ov-config", twice[1]]) == 2
    flag_line = _one_error(capsys)
    arm = f"B=current,{twice[0]},{twice[1]}"
    assert main(["ab", "compile", "--model", "tiny", "--arm", "A=current", "--arm", arm]) == 2
    arm_line = _one_error(capsys)
    assert flag_line == "--ov-config: INFERENCE_NUM_THREADS given twice (1 and 2)"
    assert arm_line == "--arm B: INFERENCE_NUM_THREADS given twice (1 and 2)"


def test_a_properties_file_of_many_unknown_keys_gets_a_short_line(tmp_path, capsys):
    keys = [f"NO_SUCH_KEY_{i}" for i in range(200_000)]
    path = tmp_path / "props.json"
    path.write_text(json.dumps({"CPU": dict.fromkeys(keys, "1")}))
    argv = ["run", "--model", "tiny", "--ladder", "tiny", "--ov-config-file", str(path)]
    assert main([*argv, "--no-progress"]) == 2
    line = _one_error(capsys)
    assert len(line) < 2000, len(line)
    assert "NO_SUCH_KEY_0 is not a property CPU supports" in line
    assert f"and {len(keys) - 5} more keys CPU does not take" in line


def test_cache_dir_as_a_property_names_the_cache_flags(tmp_path, capsys):
    argv = ["run", "--model", "tiny", "--ladder", "tiny", "--no-progress"]
    assert main([*argv, "--ov-config", f"CACHE_DIR={tmp_path / 'ov-cache'}"]) == 2
    line = _one_error(capsys)
    assert "CACHE_DIR is OpenVINO's own model cache" in line and "--cache-dir DIR" in line
    assert not (tmp_path / "ov-cache").exists()


@pytest.mark.parametrize(
    ("pin", "reason"), [("1-0", "1-0 is reversed"), ("0,3-2", "3-2 is reversed")]
)
def test_a_reversed_pin_range_is_named_as_one(pin, reason):
    argv = ["ab", "compile", "--model", "tiny", "--arm", "A=current", "--pin", pin]
    done = run_cli(*argv)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stderr  # argparse's usage, then the one error line
    assert f"--pin: {pin}: the range {reason}" in lines[-1]
    assert "may run on CPUs" not in lines[-1]
