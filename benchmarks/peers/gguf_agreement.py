"""Greedy agreement on SmolLM2-135M-Instruct's Q4_1 GGUF (the `smollm2-135m` preset) at the f32
hint: our ladder against transformers loading the same file (which dequantizes it to f32 with
the gguf package, the reference of tests/test_gguf_smollm2.py), and beside it openvino-genai's
LLMPipeline on the file and llama.cpp (llama-cpp-python) on the file, each against
transformers.

For each chat prompt (the file's chat template, transformers' apply_chat_template ids) every
arm generates the same number of tokens greedily, EOS not stopping it. Per arm and prompt: the
first step whose token differs from transformers' (null: none), the tokens equal before it,
and the share of steps whose token equals transformers' at the same step (after a divergence
the texts differ, so this is the looser figure). Only transformers dequantizes with the gguf
package; an arm that leaves it computes with another dequantization or with quantized
activations (llama.cpp multiplies Q4_1 blocks against 8-bit activations).

    python benchmarks/peers/gguf_agreement.py [--new-tokens 300] [--ladder 64,128,256,512]
        [--schedule i2] [--arms ours,transformers,genai,llamacpp] [--json FILE]

No timing is taken: the figures are tokens, the same on a loaded machine as on a quiet one.
The llamacpp arm needs a llama-cpp-python whose build runs on this CPU.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _shared
from _shared.results import write_result

CHATS = (
    "What is the capital of France?",
    "Write a short poem about the sea.",
    "Explain how a bicycle works.",
)
ARMS = ("ours", "transformers", "genai", "llamacpp")


def gguf_path() -> Path:
    from compile_ahead.runtime.model.presets import PRESETS
    from compile_ahead.runtime.sources.packaged_gguf import packaged_gguf

    package = PRESETS["smollm2-135m"].gguf_package
    assert package is not None
    return packaged_gguf(package)


def chat_ids(path: Path) -> list[list[int]]:
    from compile_ahead.runtime.ladder.settings.config import Prompt
    from compile_ahead.runtime.sources.resolve import resolve_model

    source = resolve_model(str(path))
    return [Prompt(text=text, chat=True).tokens(source) for text in CHATS]


def ours(path: Path, prompts: list[list[int]], n: int, ladder: str, schedule: str) -> list:
    from compile_ahead.runtime.compile.settings.options import CompileOptions
    from compile_ahead.runtime.ladder.runner import run_ladder
    from compile_ahead.runtime.ladder.settings.capacities import Ladder
    from compile_ahead.runtime.ladder.settings.config import RunConfig
    from compile_ahead.runtime.ladder.settings.run_protocol import greedy
    from compile_ahead.runtime.ladder.settings.schedules import SCHEDULES
    from compile_ahead.runtime.sources.resolve import resolve_model

    source = resolve_model(str(path))
    options = CompileOptions(inference_precision="f32")
    out = []
    for prompt in prompts:
        config = RunConfig(
            SCHEDULES[schedule], Ladder.parse(ladder), greedy(prompt, n - 1), options=options
        )
        result = run_ladder(source, config)
        if result.error is not None:
            raise SystemExit(f"our run failed: {result.error}")
        out.append([result.first_token, *result.predicted])
    return out


def transformers_greedy(path: Path, prompts: list[list[int]], n: int) -> list:
    sys.modules.setdefault("torchvision", None)  # type: ignore[arg-type]  # see tests/conftest.py
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32
    ).eval()
    torch.set_num_threads(1)  # two threads spin against each other on a shared machine
    out = []
    with torch.no_grad():
        for prompt in prompts:
            step = model(torch.tensor([prompt]), use_cache=True)
            tokens = [int(step.logits[0, -1].argmax())]
            while len(tokens) < n:
                past = step.past_key_values
                step = model(torch.tensor([[tokens[-1]]]), past_key_values=past, use_cache=True)
                tokens.append(int(step.logits[0, -1].argmax()))
            out.append(tokens)
    return out


def genai_greedy(path: Path, prompts: list[list[int]], n: int) -> list:
    import numpy as np
    import openvino as ov
    import openvino_genai

    properties = {
        "INFERENCE_PRECISION_HINT": "f32",
        "KV_CACHE_PRECISION": "f32",
        "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0",
    }
    pipe = openvino_genai.LLMPipeline(str(path), "CPU", **properties)
    config = openvino_genai.GenerationConfig()
    # ignore_eos alone: min_new_tokens would mask the EOS logit, changing the argmax.
    config.max_new_tokens, config.ignore_eos = n, True
    out = []
    for prompt in prompts:
        result = pipe.generate(ov.Tensor(np.array([prompt], np.int64)), config)
        out.append([int(t) for t in result.tokens[0]])
    return out


def llamacpp_greedy(path: Path, prompts: list[list[int]], n: int) -> list:
    import numpy as np
    from llama_cpp import Llama

    out = []
    for prompt in prompts:
        llm = Llama(model_path=str(path), n_ctx=len(prompt) + n + 8, n_threads=2, verbose=False)
        llm.eval(prompt)
        tokens: list[int] = []
        while len(tokens) < n:
            tokens.append(int(np.argmax(llm.scores[llm.n_tokens - 1])))
            llm.eval([tokens[-1]])
        out.append(tokens)
    return out


def agreement(got: list[int], reference: list[int]) -> dict:
    first = next((i for i, (a, b) in enumerate(zip(got, reference, strict=False)) if a != b), None)
    same = sum(a == b for a, b in zip(got, reference, strict=False))
    return {
        "first_divergence": first,
        "equal_before": len(reference) if first is None else first,
        "equal_steps_share": same / max(len(reference), 1),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--new-tokens", type=int, default=300)
    p.add_argument("--ladder", default="64,128,256,512")
    p.add_argument("--schedule", default="i2")
    p.add_argument("--arms", default=",".join(ARMS), help=f"of {', '.join(ARMS)}")
    p.add_argument("--json", type=Path, default=None, help="write the result file here")
    args = p.parse_args()
    arms = [a for a in args.arms.split(",") if a]
    if "transformers" not in arms or any(a not in ARMS for a in arms):
        raise SystemExit(f"--arms: transformers (the reference) and any of {', '.join(ARMS)}")
    path = gguf_path()
    prompts = chat_ids(path)
    n = args.new_tokens
    run = {
        "ours": lambda: ours(path, prompts, n, args.ladder, args.schedule),
        "transformers": lambda: transformers_greedy(path, prompts, n),
        "genai": lambda: genai_greedy(path, prompts, n),
        "llamacpp": lambda: llamacpp_greedy(path, prompts, n),
    }
    tokens = {arm: run[arm]() for arm in arms}
    results: dict = {"prompts": {"texts": list(CHATS), "ids": prompts}, "arms": {}}
    print(f"{'arm':<14}" + "".join(f"  prompt {i}: first diff, equal share" for i in range(3)))
    for arm in arms:
        rows = [agreement(t, r) for t, r in zip(tokens[arm], tokens["transformers"], strict=True)]
        results["arms"][arm] = {"tokens": tokens[arm], "against_transformers": rows}
        cells = "".join(
            f"  {r['first_divergence']!s:>22}, {r['equal_steps_share']:.3f}" for r in rows
        )
        print(f"{arm:<14}{cells}")
    if args.json is not None:
        write_result(args.json, "gguf_agreement", results, args)


if __name__ == "__main__":
    main()
