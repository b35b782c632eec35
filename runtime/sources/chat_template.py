"""A model's chat template applied to one user message (`run --chat`, `generate --chat`).

The template is Jinja2 that comes with the model (a GGUF's ``tokenizer.chat_template``, a
checkpoint's tokenizer_config.json), so it is rendered in Jinja2's immutable sandbox: it can
read the messages and flags it is given and nothing else. The rendered text is tokenized
without the tokenizer's own beginning-of-sequence token: the template writes the start of
every turn itself (SmolLM2's starts with ``<|im_start|>``, which is also its BOS), so adding it
again would give the model two in a row, a sequence it never saw; this is what transformers'
``apply_chat_template`` does (it tokenizes the rendered text with ``add_special_tokens=False``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.sources.tokenizer import TextTokenizer, check_token_ids

if TYPE_CHECKING:
    from compile_ahead.runtime.sources.base import ModelSource


def chat_prompt(source: ModelSource, text: str, origin: str | None = None) -> list[int]:
    """``text`` as a user message through the model's chat template, tokenized by the model's
    tokenizer; ``origin`` names where the text was given (--prompt by default)."""
    what = origin or "--prompt"
    chat = source.chat_template()
    if chat is None:
        raise CompileAheadError(f"--chat: {source.name} has no chat template")
    template, special = chat
    ids = encode_chat(source.text_tokenizer(), render_chat(template, text, special, source.name))
    check_token_ids(ids, source.config.vocab_size, f"{what} (the tokenizer of {source.name})")
    return ids


def render_chat(template: str, text: str, special: dict[str, str], where: str) -> str:
    """The template applied to ``text`` as one user message, with the generation prompt
    (the assistant's turn opened); ``special`` gives bos_token and eos_token."""
    from jinja2 import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def refuse(message: str) -> None:
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = refuse
    try:
        return env.from_string(template).render(
            messages=[{"role": "user", "content": text}],
            add_generation_prompt=True,
            **special,
        )
    except TemplateError as err:
        raise CompileAheadError(f"{where}: its chat template fails: {err}") from None


def encode_chat(tokenizer: TextTokenizer, rendered: str) -> list[int]:
    """The rendered chat's ids, without a beginning-of-sequence token added."""
    encode: Any = tokenizer.encode
    try:
        encoded = encode(rendered, add_special_tokens=False)
    except TypeError:  # a tokenizer that adds no special tokens of its own (an OpenVINO IR)
        encoded = encode(rendered)
    return [int(i) for i in encoded.ids]
