"""SmolLM2-135M-Instruct's GGUF behind the endpoint: chat completions through the file's own
chat template, streamed and not, from concurrent openai clients. Each answer's prompt equals
transformers' apply_chat_template and its tokens equal transformers' greedy run on the same
file at f32 (conftest's smollm2_reference), cut at EOS as the endpoint stops there."""

from __future__ import annotations

import threading
import time

import pytest

from compile_ahead.runtime.sources.base import ModelSource

if not hasattr(ModelSource, "chat_template"):
    pytest.skip(
        "model sources name no chat template of their own here (GGUF chat templates come with "
        "the GGUF model source)",
        allow_module_level=True,
    )

from endpoint_server import MODEL, served

from compile_ahead.runtime.serving.api import ServingSettings, start_engine
from compile_ahead.runtime.sources.resolve import resolve_model
from conftest import SMOLLM2_CHATS

pytestmark = pytest.mark.slow
NEW_TOKENS = 64


def test_smollm2_chat_over_http_equals_transformers(smollm2_reference, f32_cached):
    from compile_ahead.profiling.serving_http.chat import source_chat_template

    source = resolve_model("smollm2-135m")
    settings = ServingSettings(
        (1, 2, 4), (128, 256), "up-front", None, {"options": f32_cached, "stop_at_eos": True}
    )
    engine = start_engine(source, settings)
    deadline = time.monotonic() + 600
    while not engine.status()["ready"]:
        assert time.monotonic() < deadline, "the engine never became ready"
        time.sleep(0.1)
    got: dict[tuple[int, bool], tuple] = {}
    try:
        with served(
            engine,
            tokenizer=source.text_tokenizer(),
            chat_template=source_chat_template(source),
            vocab_size=source.config.vocab_size,
        ) as s:
            client = s.client(timeout=600)

            def ask(i: int, stream: bool) -> None:
                messages = [{"role": "user", "content": SMOLLM2_CHATS[i]}]
                if stream:
                    chunks = list(
                        client.chat.completions.create(
                            model=MODEL,
                            messages=messages,
                            max_tokens=NEW_TOKENS,
                            stream=True,
                            stream_options={"include_usage": True},
                        )
                    )
                    ids = [t for c in chunks[:-1] for t in c.choices[0].model_extra["token_ids"]]
                    text = "".join(c.choices[0].delta.content or "" for c in chunks[:-1])
                    got[(i, stream)] = (ids, chunks[-1].usage.prompt_tokens, text)
                else:
                    r = client.chat.completions.create(
                        model=MODEL, messages=messages, max_tokens=NEW_TOKENS
                    )
                    ids = r.choices[0].model_extra["token_ids"]
                    got[(i, stream)] = (ids, r.usage.prompt_tokens, r.choices[0].message.content)

            threads = [
                threading.Thread(target=ask, args=(i, stream))
                for i in range(len(SMOLLM2_CHATS))
                for stream in (False, True)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(900)
    finally:
        engine.drain(10)
    eos = set(source.config.eos_token_ids)
    tokenizer = source.text_tokenizer()
    for i, (prompt, reference) in enumerate(
        zip(smollm2_reference["prompts"], smollm2_reference["tokens"], strict=True)
    ):
        expected = reference[:NEW_TOKENS]
        cut = next((k for k, t in enumerate(expected) if t in eos), None)
        if cut is not None:
            expected = expected[: cut + 1]
        for stream in (False, True):
            ids, prompt_tokens, text = got[(i, stream)]
            assert prompt_tokens == len(prompt), (i, stream)
            assert ids == expected, (i, stream)
            assert text == tokenizer.decode(ids), (i, stream)
