"""OpenVINO IRs exported by optimum-intel (FP16, INT8, INT4) on the ladder: greedy tokens through
every schedule and across every boundary equal openvino-genai LLMPipeline's on the same IR, and
broken or unsuitable IRs fail with one line naming the problem."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import ir_fixtures
import numpy as np
import openvino_genai  # noqa: F401  (declared test dependency: a broken install fails)
import optimum.intel  # noqa: F401  (declared test dependency: a broken install fails)
import pytest

from compile_ahead.commands.main import main
from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.compile.settings.device_defaults import default_prefill
from compile_ahead.runtime.graphs.spec import GraphSpec
from compile_ahead.runtime.ladder.runner import run_ladder
from compile_ahead.runtime.ladder.settings.capacities import Ladder
from compile_ahead.runtime.ladder.settings.config import RunConfig
from compile_ahead.runtime.ladder.settings.run_protocol import greedy
from compile_ahead.runtime.ladder.settings.schedules import SCHEDULES
from compile_ahead.runtime.sources.resolve import resolve_model
from compile_ahead.runtime.sources.tokenizer import load_tokenizer
from conftest import F32

pytestmark = pytest.mark.slow

# Exact math on both sides: f32 compute and KV, and no dynamic int8 quantization of activations
# (the CPU plugin's default for compressed weights, which rounds differently per graph shape).
EXACT = {"DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"}
EXACT_F32 = replace(F32, extra_config=EXACT)
LADDER = Ladder.parse("16,32,64,128")
PROMPT = [5, 17, 300, 42, 7, 99, 100, 3, 8, 9, 11]  # 11 tokens: chunks of 4 end padded
# The run decodes until the top rung is full: 128 - 11 steps, one token each.
DECODE = LADDER.top - len(PROMPT)
EXPORTS = [(a, f) for a in ir_fixtures.ARCHITECTURES for f in ir_fixtures.FORMATS]


_genai_cache: dict[tuple[Path, tuple[int, ...], int], list[int]] = {}


def genai_greedy(model_dir: Path, prompt: list[int], new_tokens: int) -> list[int]:
    """LLMPipeline's greedy tokens on the same IR, with the same exact math as EXACT_F32."""
    key = (model_dir, tuple(prompt), new_tokens)
    if key not in _genai_cache:
        import openvino as ov
        import openvino_genai as genai

        pipe = genai.LLMPipeline(
            str(model_dir),
            "CPU",
            INFERENCE_PRECISION_HINT="f32",
            KV_CACHE_PRECISION="f32",
            **EXACT,
        )
        cfg = genai.GenerationConfig()
        cfg.max_new_tokens = new_tokens
        cfg.ignore_eos = True
        cfg.eos_token_id = 0
        cfg.stop_token_ids = set()
        ids = np.asarray([prompt], np.int64)
        inputs = genai.TokenizedInputs(ov.Tensor(ids), ov.Tensor(np.ones_like(ids)))
        _genai_cache[key] = [int(t) for t in pipe.generate(inputs, cfg).tokens[0]]
    return _genai_cache[key]


def _report(run) -> dict:
    report = run.report
    return report.to_json() if hasattr(report, "to_json") else report


# -- greedy tokens against LLMPipeline ----------------------------------------------------------


@pytest.mark.parametrize(("arch", "fmt"), EXPORTS, ids=[f"{a}-{f}" for a, f in EXPORTS])
def test_every_schedule_matches_llmpipeline(ir_exports, arch, fmt):
    model_dir = ir_exports[(arch, fmt)]
    source = resolve_model(str(model_dir))
    expected = genai_greedy(model_dir, PROMPT, DECODE + 1)
    # Token by token, the CPU's default prefill graph, and each prefill graph shape.
    prefill = {"b0": (1, None), "b1": (4, None), "i1": (4, "static"), "i2": (4, "paged")}
    for name in ("b0", "b1", "i1", "i2", "i3"):
        chunk, shape = prefill.get(name, (4, "dynamic"))
        settings = RunConfig(
            SCHEDULES[name],
            LADDER,
            greedy(PROMPT, DECODE),
            prefill_chunk=chunk,
            prefill_shape=shape,
            options=EXACT_F32,
        )
        run = run_ladder(source, settings)
        assert run.error is None, f"{name}: {run.error}"
        # predicted[i] is the argmax after feeding token i; the first token comes from prefill.
        ours = [expected[0], *run.predicted]
        assert len(run.predicted) == DECODE, name
        assert ours == expected[: len(ours)], f"{arch}-{fmt} {name}"
        if name != "b0":  # b0 runs the top rung only; the others cross 16, 32 and 64
            crossed = [(b["from"], b["to"]) for b in _report(run)["boundaries"]]
            assert crossed == [(16, 32), (32, 64), (64, 128)], name


def test_cli_run_and_generate_match_llmpipeline(ir_exports, tmp_path, capsys):
    # FP16: the CLI has no flag for EXACT, which only matters for compressed weights.
    model_dir = ir_exports[("phi3", "fp16")]
    expected = genai_greedy(model_dir, PROMPT, DECODE + 1)
    report_path = tmp_path / "run.json"
    common = ["--model", str(model_dir), "--inference-precision", "f32", "--kv-precision", "f32"]
    common += ["--cache-dir", str(tmp_path / "cache")]  # compiled rungs cached here, not in ~
    ids = ",".join(map(str, PROMPT))
    run_args = ["--schedule", "i2", "--ladder", "16,32,64,128", "--prompt-ids", ids]
    run_args += ["--prefill-chunk", "4", "--no-progress", "--report", str(report_path)]
    code = main(["run", *common, *run_args])
    assert code == 0
    report = json.loads(report_path.read_text())
    assert report["weight_format"] == "FP16 (10)"
    assert report["kv_precision"] == "f32"
    assert report["tokens_decoded"] == DECODE
    assert report["prefill"] == {
        "path": default_prefill("CPU").shape,
        "chunk": 4,
        "chosen_by": "flag",
        "decode_compile": "after-prefill",
    }
    assert report["first_token_s"] >= report["first_token_compile_s"] + report["prefill_s"]
    window = report["boundary_tokens"]
    assert len(window) >= 9  # steps on both sides of 16, 32 and 64
    for entry in window:  # step i's top-1 is generated token i + 1
        assert entry["top1"] == expected[entry["step"] + 1], entry

    capsys.readouterr()
    assert main(["generate", *common, "--prompt-ids", ids, "--max-new-tokens", "20", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["sequences"][0]["tokens"] == expected[:20]
    assert out["model_format"] == "openvino-ir"

    # A text prompt goes through the export's openvino-tokenizers IRs.
    from tokenizers import Tokenizer

    text = "the quick brown fox"
    ids = Tokenizer.from_file(str(model_dir / "tokenizer.json")).encode(text).ids
    assert main(["generate", *common, "--prompt", text, "--max-new-tokens", "6", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["sequences"][0]["tokens"] == genai_greedy(model_dir, ids, 6)
    assert isinstance(out["sequences"][0]["text"], str)


# -- the IR stays what it is -------------------------------------------------------------------


@pytest.mark.parametrize(("arch", "fmt"), EXPORTS, ids=[f"{a}-{f}" for a, f in EXPORTS])
def test_weight_format_named_and_kept_in_rung_graphs(ir_exports, arch, fmt):
    from compile_ahead.runtime.model.ir_weights import weight_format

    source = resolve_model(str(ir_exports[(arch, fmt)]))
    expected = {
        "fp16": "FP16",
        "int8": "INT8 per-channel asym",
        "int4": f"INT4 group-wise {'sym' if arch in ir_fixtures.SYMMETRIC_INT4 else 'asym'} g32",
    }[fmt]
    assert source.weight_format.primary == expected
    assert expected in source.label
    assert source.describe()["weight_format"] == source.weight_format.summary
    # A rung graph holds the same compressed constants: nothing was decompressed.
    rung = source.build_graph(GraphSpec(32, 4, "f32", 128))
    assert weight_format(rung) == source.weight_format


def test_fp16_rung_graph_keeps_its_lookup_unfolded(ir_exports):
    """The embedding Gather of an FP16 IR's rung graph carries fold_guard's mark, which spares
    the CPU plugin's compile from converting the table (test_fold_guard.py measures it)."""
    from compile_ahead.runtime.graphs.fold_guard import disable_folding_key

    source = resolve_model(str(ir_exports[("qwen2", "fp16")]))
    model = source.build_graph(GraphSpec(32, 1, "f32", 128))
    marked = [op for op in model.get_ops() if disable_folding_key() in op.get_rt_info()]
    assert [op.get_type_name() for op in marked] == ["Gather"]
    assert marked[0].input_value(1).get_node().get_type_name() != "Constant"  # reads the ids


def test_rung_graph_interface(ir_exports):
    source = resolve_model(str(ir_exports[("llama", "fp16")]))
    cfg = source.config
    model = source.build_graph(GraphSpec(32, 4, "bf16", 128))
    shapes = {p.get_any_name(): (list(p.get_shape()), p.get_element_type()) for p in model.inputs}
    assert shapes["past_key.0"][0] == [1, cfg.num_kv_heads, 128, cfg.head_dim]
    assert shapes["past_key.0"][1].to_string() == "bf16"
    assert shapes["attention_mask"][0] == [1, 32 + 4]
    assert shapes["input_ids"][0] == [1, 4]
    outputs = {p.get_any_name(): list(p.get_shape()) for p in model.outputs}
    # Only the chunk's new rows come out, and one row of logits.
    assert outputs["new_value.1"] == [1, cfg.num_kv_heads, 4, cfg.head_dim]
    assert outputs["logits"] == [1, 1, cfg.vocab_size]
    assert not any(name.startswith("present") for name in outputs)
    # A decode graph's attention reads the cache input directly: no SDPA over a KV concat is
    # left (a prefill chunk keeps the plugin's fused SDPA).
    decode = source.build_graph(GraphSpec(32, 1, "f32", 128))
    assert "ScaledDotProductAttention" not in {op.get_type_name() for op in decode.get_ops()}
    assert "ScaledDotProductAttention" in {op.get_type_name() for op in model.get_ops()}


@pytest.mark.parametrize("dynamic", [False, True])
def test_an_ir_steps_outputs_follow_the_request(ir_exports, dynamic):
    from step_checks import check_outputs_follow_the_request

    check_outputs_follow_the_request(resolve_model(str(ir_exports[("qwen2", "fp16")])), dynamic)


def test_concat_free_attention_equals_the_irs_own(ir_exports):
    """The replaced attention against the IR's own SDPA over Concat(past, new), same steps."""
    from compile_ahead.runtime.base.ov_core import core
    from compile_ahead.runtime.compile.settings.options import device_config
    from compile_ahead.runtime.graphs.ir.cut import build_ir_step_model
    from compile_ahead.runtime.graphs.ir.step import IRStep
    from compile_ahead.runtime.model.ir_reader import read_ir, stateless
    from compile_ahead.runtime.model.kv_arena import KVArena

    source = resolve_model(str(ir_exports[("phi3", "fp16")]))
    cfg = source.config
    logits = {}
    for fast in (True, False):
        steps = {}
        for chunk in (4, 1):
            spec = GraphSpec(32, chunk, "f32", 64)
            model, kv = stateless(read_ir(source.files), "ir")
            model = build_ir_step_model(model, kv, spec, fast_attention=fast)
            compiled = core().compile_model(model, "CPU", device_config(EXACT_F32.resolved()))
            steps[chunk] = IRStep(compiled, spec, cfg.num_layers)
        arena = KVArena(cfg, 64, "f32")
        seen = []
        t = 0
        for chunk, ids in ((4, PROMPT[:4]), (4, PROMPT[4:7]), (1, [9]), (1, [33])):
            step = steps[chunk]
            step.bind(arena)
            out = step.run(np.asarray(ids, np.int64), t, len(ids) - 1)
            for layer in range(cfg.num_layers):
                k, v = out.new_keys[layer], out.new_values[layer]
                arena.write(layer, t, k[:, :, : len(ids)], v[:, :, : len(ids)])
            t += len(ids)
            seen.append(out.logits.copy())
        logits[fast] = np.stack(seen)
    np.testing.assert_allclose(logits[True], logits[False], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", ["dynamic", "paged"])
@pytest.mark.parametrize(("arch", "fmt"), [("qwen2", "fp16"), ("phi3", "int8")])
def test_prefill_graphs_equal_token_by_token(ir_exports, arch, fmt, shape):
    """The IR's prefill over the filled slots only (its own fused SDPA over the past sliced to
    the filled length, or the IR in paged-attention form with its K/V read out of cache
    blocks) against the decode graph token by token: the prompt's last logits and every K/V
    row. Within 1e-4, as the concat-free attention against the IR's own: the sums run in
    another order."""
    from compile_ahead.runtime.compile.graph.step_compile import compile_step
    from compile_ahead.runtime.ladder.settings.prefill_plan import PrefillPlan
    from compile_ahead.runtime.model.kv_arena import KVArena

    source = resolve_model(str(ir_exports[(arch, fmt)]))
    cfg = source.config
    prompt = PROMPT * 3  # 33 tokens: calls of 8, 8, 8, 8 and 1 on a prefill graph
    runs = {}
    for spec in (GraphSpec(64, 1, "f32"), PrefillPlan(8, shape).spec(64, "f32")):
        step = compile_step(source, spec, EXACT_F32).step
        arena = KVArena(cfg, 64, "f32")
        step.bind(arena)
        t = 0
        for start in range(0, len(prompt), spec.chunk):
            ids = np.asarray(prompt[start : start + spec.chunk], np.int64)
            out = step.run(ids, t, len(ids) - 1)
            for layer in range(cfg.num_layers):
                k, v = out.new_keys[layer], out.new_values[layer]
                arena.write(layer, t, k[:, :, : len(ids)], v[:, :, : len(ids)])
            t += len(ids)
        kv = [a[:, :, :t].copy() for a in arena.keys + arena.values]
        runs[spec.chunk] = (out.logits.copy(), kv)
    np.testing.assert_allclose(runs[8][0], runs[1][0], atol=1e-4, rtol=0)
    for a, b in zip(runs[8][1], runs[1][1], strict=True):
        np.testing.assert_allclose(a, b, atol=1e-4, rtol=0)
    assert np.abs(runs[8][0]).max() > 0.1  # logits of a real model, not zeros


# -- tokenizers --------------------------------------------------------------------------------


def test_openvino_tokenizer_then_tokenizer_json(ir_exports, tmp_path):
    from tokenizers import Tokenizer

    from compile_ahead.runtime.sources.ov_tokenizer import OpenVINOTokenizer

    model_dir = ir_exports[("qwen2", "int8")]
    text = "the quick brown fox compiles ahead"
    reference = Tokenizer.from_file(str(model_dir / "tokenizer.json")).encode(text).ids
    tok = load_tokenizer(model_dir, "export")
    assert isinstance(tok, OpenVINOTokenizer)
    assert tok.encode(text).ids == reference
    assert tok.decode(reference) == text

    bare = tmp_path / "no-ov-tokenizer"
    bare.mkdir()
    for name in ("openvino_model.xml", "openvino_model.bin", "config.json", "tokenizer.json"):
        shutil.copy(model_dir / name, bare / name)
    tok = load_tokenizer(resolve_model(str(bare)).model_dir, "bare")
    assert not isinstance(tok, OpenVINOTokenizer)
    assert tok.encode(text).ids == reference


def test_prompt_without_tokenizer_is_one_line(ir_exports, tmp_path, capsys):
    model_dir = ir_exports[("llama", "int8")]
    xml = tmp_path / "m.xml"
    shutil.copy(model_dir / "openvino_model.xml", xml)
    shutil.copy(model_dir / "openvino_model.bin", tmp_path / "m.bin")
    shutil.copy(model_dir / "config.json", tmp_path)  # without it the IR itself is refused
    assert main(["generate", "--model", str(xml), "--prompt", "hello"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--prompt-ids" in err and "openvino_tokenizer.xml" in err


# -- one-line errors ---------------------------------------------------------------------------


def _one_line(excinfo) -> str:
    message = str(excinfo.value)
    assert "\n" not in message
    return message


def test_missing_bin(ir_exports, tmp_path):
    shutil.copy(ir_exports[("qwen2", "fp16")] / "openvino_model.xml", tmp_path)
    with pytest.raises(CompileAheadError) as err:
        resolve_model(str(tmp_path))
    assert "openvino_model.bin is missing" in _one_line(err)


def test_bin_size_mismatch(ir_exports, tmp_path):
    src = ir_exports[("qwen2", "int4")]
    shutil.copy(src / "openvino_model.xml", tmp_path)
    data = (src / "openvino_model.bin").read_bytes()
    (tmp_path / "openvino_model.bin").write_bytes(data[:-100])
    with pytest.raises(CompileAheadError) as err:
        resolve_model(str(tmp_path / "openvino_model.xml"))
    assert f"{len(data) - 100} bytes" in _one_line(err) and str(len(data)) in str(err.value)


def test_onnx_refused(tmp_path):
    path = tmp_path / "model.onnx"
    path.write_bytes(b"\x08\x07")
    with pytest.raises(CompileAheadError) as err:
        resolve_model(str(path))
    assert "ONNX" in _one_line(err)


def _save(model, path: Path) -> str:
    import openvino as ov

    ov.save_model(model, str(path), compress_to_fp16=False)
    return str(path)


def _toy_decoder(tmp_path: Path, *, state: bool, beam_idx: bool, seq_axis: int) -> str:
    """A one-layer stand-in with optimum's interface, to break one part of it at a time."""
    import openvino as ov
    from openvino import opset13 as ops
    from openvino.op.util import Variable, VariableInfo

    ids = ops.parameter([-1, -1], ov.Type.i64, name="input_ids")
    mask = ops.parameter([-1, -1], ov.Type.i64, name="attention_mask")
    params = [ids, mask]
    hidden = ops.convert(ops.unsqueeze(ids, ops.constant(np.int64(-1))), ov.Type.f32)
    kv_shape = [-1, 2, -1, 4] if seq_axis == 2 else [-1, -1, 2, 4]
    new = ops.broadcast(
        hidden, ops.constant(np.array([1, 2, 1, 4] if seq_axis == 2 else [1, 1, 2, 4]))
    )
    sinks = []
    logits_in = hidden
    if state:
        info = VariableInfo()
        info.data_shape = ov.PartialShape(kv_shape)
        info.data_type = ov.Type.f32
        info.variable_id = "past_key_values.0.keypresent.0.key"
        var = Variable(info)
        empty = [1, 2, 0, 4] if seq_axis == 2 else [1, 0, 2, 4]
        init = ops.broadcast(ops.constant(np.float32(0)), ops.constant(np.array(empty)))
        past = ops.read_value(init, var)
        if beam_idx:
            beam = ops.parameter([-1], ov.Type.i32, name="beam_idx")
            params.append(beam)
            past = ops.gather(past, beam, ops.constant(np.int64(0)))
        cat = ops.concat([past, new], seq_axis)
        sinks.append(ops.assign(cat, var))
        logits_in = ops.add(
            hidden, ops.reduce_sum(cat, ops.constant(np.array([0, 1, 2, 3])), False)
        )
    logits = ops.result(ops.multiply(logits_in, ops.constant(np.ones((1, 1, 8), np.float32))))
    logits.output(0).get_tensor().set_names({"logits"})
    for p in params:
        p.output(0).get_tensor().set_names({p.get_friendly_name()})
    model = ov.Model([logits], sinks, params, "toy")
    return _save(model, tmp_path / "toy.xml")


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        (dict(state=False, beam_idx=False, seq_axis=2), "no KV state"),
        (dict(state=True, beam_idx=False, seq_axis=2), "no beam_idx input"),
        (dict(state=True, beam_idx=True, seq_axis=1), "a KV layout we cannot place"),
    ],
    ids=["no-state", "no-beam-idx", "seq-major-kv"],
)
def test_not_a_stateful_decoder(tmp_path, kwargs, expected):
    path = _toy_decoder(tmp_path, **kwargs)
    with pytest.raises(CompileAheadError) as err:
        resolve_model(path)
    assert expected in _one_line(err)


def test_sliding_window_rungs_must_fit(ir_exports, tmp_path):
    src = ir_exports[("phi3", "int8")]
    for name in ("openvino_model.xml", "openvino_model.bin"):
        shutil.copy(src / name, tmp_path / name)
    config = json.loads((src / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "sliding_window": 40}))
    source = resolve_model(str(tmp_path))
    run = run_ladder(
        source, RunConfig(SCHEDULES["i1"], LADDER, greedy(PROMPT, 60), options=EXACT_F32)
    )
    assert isinstance(run.error, CompileAheadError)
    assert "sliding-window attention (window 40)" in str(run.error)
    assert run.predicted == []  # i1 compiles every rung before decoding: nothing ran


def test_weight_format_of_float_irs():
    import openvino as ov
    from openvino import opset13 as ops

    from compile_ahead.runtime.model.ir_weights import weight_format

    x = ops.parameter([1, 64], ov.Type.f32, name="x")
    f32 = ops.constant(np.ones((64, 64), np.float32))
    bits = ov.Tensor(np.zeros((64, 64), np.uint16), [64, 64], ov.Type.bf16)
    bf16 = ops.convert(ov.op.Constant(bits), ov.Type.f32)  # a bf16 weight and its decompression
    y = ops.matmul(ops.matmul(x, f32, False, True), bf16, False, True)
    model = ov.Model([ops.result(y)], [x])
    assert dict(weight_format(model).parts) == {"FP32": 1, "BF16": 1}
