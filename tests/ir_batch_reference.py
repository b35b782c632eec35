"""What the IR batch tests share: exact f32 options, the ladder, ragged prompts and
LLMPipeline's batched greedy tokens on an IR (the reference every batched IR run equals)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from compile_ahead.runtime.ladder.settings.capacities import Ladder
from conftest import F32

# Exact math on both sides, as in test_ir_models.py: f32 compute and KV, and no dynamic int8
# quantization of activations (which rounds differently per graph shape).
EXACT = {"DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"}
EXACT_F32 = replace(F32, extra_config=EXACT)

LADDER = Ladder.parse("16,32,64,128")
# Ragged, the longest on the first rung: 60 decode steps take it past 16, 32 and 64.
PROMPTS = [[5, 17, 300], list(range(3, 15)), [7, 8, 9, 10, 11, 12, 13], [42, 99]]
DECODE_TOKENS = 60


def genai_batch_greedy(model_dir: Path, prompts: list[list[int]], new_tokens: int):
    """LLMPipeline's batched greedy tokens, ragged prompts left-padded under the mask."""
    import openvino as ov
    import openvino_genai as genai

    pipe = genai.LLMPipeline(
        str(model_dir), "CPU", INFERENCE_PRECISION_HINT="f32", KV_CACHE_PRECISION="f32", **EXACT
    )
    cfg = genai.GenerationConfig()
    cfg.max_new_tokens = new_tokens
    cfg.do_sample = False
    cfg.ignore_eos = True
    cfg.eos_token_id = 0
    cfg.stop_token_ids = set()
    width = max(map(len, prompts))
    ids = np.zeros((len(prompts), width), np.int64)
    mask = np.zeros_like(ids)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = prompt
        mask[row, width - len(prompt) :] = 1
    out = pipe.generate(genai.TokenizedInputs(ov.Tensor(ids), ov.Tensor(mask)), cfg)
    return [[int(t) for t in tokens] for tokens in out.tokens]
