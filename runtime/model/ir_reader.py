"""A stateful decoder IR (optimum-intel export) as a model source for the ladder.

The IR is checked once when resolved: it must carry its KV in state variables (ReadValue/Assign),
take ``beam_idx``, ``input_ids`` and ``attention_mask``, and after OpenVINO's own
``stateful_to_stateless_transformation`` every past K/V must be a [batch, kv_heads, seq,
head_dim] input that the graph appends to along the sequence axis (a Concat), because that is
the layout our KV stores hold and the place where a rung graph is cut. What is missing is named
in one line.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import openvino as ov
from openvino._offline_transformations import stateful_to_stateless_transformation

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.model.architecture import (
    ModelConfig,
    RopeConfig,
    eos_token_ids,
    read_json_object,
)
from compile_ahead.runtime.model.ir_files import IRFiles

INPUT_IDS = "input_ids"
ATTENTION_MASK = "attention_mask"
POSITION_IDS = "position_ids"
BEAM_IDX = "beam_idx"
LOGITS = "logits"

# stateful_to_stateless_transformation names the past inputs past_key_values.<i>.key|value.
_PAST_NAME = re.compile(r"(\d+)\.(key|value)$")


@dataclass(frozen=True)
class KVInputs:
    """Past K/V parameters of a stateless decoder, per layer, and the Concat each feeds."""

    keys: list[ov.Node]
    values: list[ov.Node]
    concats: dict[str, ov.Node]  # past parameter name -> its sequence-axis Concat


def read_ir(files: IRFiles) -> ov.Model:
    """Read the IR (weights memory-mapped, never copied or decompressed)."""
    from compile_ahead.runtime.base.ov_core import core, openvino_error_summary

    try:
        return core().read_model(str(files.xml), str(files.bin))
    except RuntimeError as err:
        raise CompileAheadError(
            f"{files.xml}: OpenVINO cannot read it: {openvino_error_summary(err)}"
        ) from None


def _input_names(model: ov.Model) -> set[str]:
    return {name for port in model.inputs for name in port.get_names()}


def check_stateful_decoder(model: ov.Model, where: str) -> None:
    """The stateful part of the contract: KV state, beam_idx, token ids and a mask."""
    kinds = {op.get_type_name() for op in model.get_ops()}
    names = _input_names(model)
    if "ReadValue" not in kinds or "Assign" not in kinds:
        raise CompileAheadError(
            f"{where}: not a stateful decoder: no KV state (ReadValue/Assign variables); export "
            "with `optimum-cli export openvino --task text-generation-with-past`"
        )
    if BEAM_IDX not in names:
        raise CompileAheadError(f"{where}: not a stateful decoder: no beam_idx input")
    for needed in (INPUT_IDS, ATTENTION_MASK):
        if needed not in names:
            raise CompileAheadError(f"{where}: not a stateful decoder: no {needed} input")
    if not any(LOGITS in port.get_names() for port in model.outputs):
        raise CompileAheadError(f"{where}: not a decoder: no logits output")


def _static_dim(param: ov.Node, axis: int) -> int | None:
    pshape = param.get_output_partial_shape(0)
    if pshape.rank.is_dynamic or pshape.rank.get_length() != 4 or pshape[axis].is_dynamic:
        return None
    return pshape[axis].get_length()


def _sequence_concat(param: ov.Node) -> ov.Node | None:
    """The Concat that appends new rows to this past input along axis 2, if that is the use."""
    for target in param.output(0).get_target_inputs():
        node = target.get_node()
        if node.get_type_name() != "Concat" or target.get_index() != 0:
            continue
        axis = int(node.get_attributes()["axis"])
        if axis in (2, -2) and node.get_input_size() == 2:
            return node
    return None


def kv_inputs(model: ov.Model, where: str) -> KVInputs:
    """Past K/V inputs of a stateless model, checked to be a layout our stores can hold."""
    keys: dict[int, ov.Node] = {}
    values: dict[int, ov.Node] = {}
    concats: dict[str, ov.Node] = {}
    for param in model.get_parameters():
        name = param.get_friendly_name()
        m = _PAST_NAME.search(name)
        if not name.startswith("past_key_values") or m is None:
            continue
        if _static_dim(param, 1) is None or _static_dim(param, 3) is None:
            raise CompileAheadError(
                f"{where}: a KV layout we cannot place: {name} is "
                f"{param.get_output_partial_shape(0)}, not [batch, kv_heads, seq, head_dim]"
            )
        concat = _sequence_concat(param)
        if concat is None:
            raise CompileAheadError(
                f"{where}: a KV layout we cannot place: {name} is not appended to along its "
                "sequence axis (no Concat on axis 2)"
            )
        concats[name] = concat
        (keys if m.group(2) == "key" else values)[int(m.group(1))] = param
    if not keys or sorted(keys) != list(range(len(keys))) or sorted(values) != sorted(keys):
        raise CompileAheadError(
            f"{where}: a KV layout we cannot place: past inputs are not one key and one value "
            f"per layer (keys {sorted(keys)}, values {sorted(values)})"
        )
    shapes = {
        (_static_dim(p, 1), _static_dim(p, 3)) for p in list(keys.values()) + list(values.values())
    }
    if len(shapes) != 1:
        raise CompileAheadError(
            f"{where}: a KV layout we cannot place: layers differ in KV heads or head size "
            f"{sorted(shapes)}"
        )
    n = len(keys)
    return KVInputs([keys[i] for i in range(n)], [values[i] for i in range(n)], concats)


def stateless(model: ov.Model, where: str) -> tuple[ov.Model, KVInputs]:
    """OpenVINO's own stateful -> stateless conversion, then the KV layout check."""
    check_stateful_decoder(model, where)
    stateful_to_stateless_transformation(model)
    return model, kv_inputs(model, where)


def _max_positions(hf: dict, files: IRFiles) -> int:
    """The longest context the model was made for: every ladder is checked against it, and
    the IR's graph does not say it."""
    if files.config_json is None:
        raise CompileAheadError(
            f"{files.xml}: no config.json beside it, so the model's max_position_embeddings "
            "(its longest context) is unknown; optimum-intel exports write one"
        )
    value = hf.get("max_position_embeddings")
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise CompileAheadError(
            f"{files.config_json}: max_position_embeddings must be a positive integer, "
            f"got {json.dumps(value)}"
        )
    return value


def ir_config(model: ov.Model, kv: KVInputs, files: IRFiles) -> ModelConfig:
    """What the stores and reports need, from the IR's own shapes (config.json fills the rest
    when present; the graph is never rebuilt from it)."""
    hf = read_json_object(files.config_json) if files.config_json else {}
    where = str(files.config_json or files.xml)
    eos = eos_token_ids(files.model_dir, hf, where)
    logits = next(p for p in model.outputs if LOGITS in p.get_names())
    vocab = logits.get_partial_shape()[-1]
    kv_heads = _static_dim(kv.keys[0], 1)
    head_dim = _static_dim(kv.keys[0], 3)
    assert kv_heads is not None and head_dim is not None
    max_positions = _max_positions(hf, files)
    try:
        return _config(hf, eos, vocab, kv, kv_heads, head_dim, max_positions)
    except (TypeError, ValueError) as bad:
        raise CompileAheadError(f"{where}: malformed value ({bad})") from None


def _config(
    hf: dict,
    eos: tuple[int, ...],
    vocab: ov.Dimension,
    kv: KVInputs,
    kv_heads: int,
    head_dim: int,
    max_positions: int,
) -> ModelConfig:
    return ModelConfig(
        architecture=str(hf.get("model_type", "openvino-ir")),
        vocab_size=vocab.get_length() if vocab.is_static else int(hf.get("vocab_size", 0)),
        hidden_size=int(hf.get("hidden_size", 0)),
        intermediate_size=int(hf.get("intermediate_size", 0)),
        num_layers=len(kv.keys),
        num_heads=int(hf.get("num_attention_heads", kv_heads)),
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        rope=RopeConfig(),  # inside the IR's graph; not used on this path
        tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
        attention_bias=False,
        max_position_embeddings=max_positions,
        eos_token_ids=eos,
    )


def sliding_window(files: IRFiles) -> int | None:
    """The attention window config.json declares, if any is in force."""
    hf = read_json_object(files.config_json) if files.config_json else {}
    window = hf.get("sliding_window")
    if not isinstance(window, int) or window <= 0 or hf.get("use_sliding_window") is False:
        return None
    return window
