"""A model's own chat template (the Jinja template a Hugging Face tokenizer carries), turning
chat messages into the prompt text the model was trained on. A model without one cannot serve
/v1/chat/completions (a 400 says so); nothing is guessed.

The template comes from the model directory: ``chat_template.jinja``, else the
``chat_template`` of ``tokenizer_config.json`` (a string, or a list of named templates of which
"default" is taken). It runs in Jinja's immutable sandbox, as transformers runs it: a template
is code that came with the model, so it gets no access to Python objects beyond its inputs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from compile_ahead.errors import CompileAheadError
from compile_ahead.output.input_files import read_input_text
from compile_ahead.profiling.serving_http.errors import bad_request
from compile_ahead.profiling.serving_http.requests import ChatMessage

# tokenizer_config.json holds the added tokens' table too: a few MiB for large vocabularies.
CONFIG_MAX_BYTES = 32 * 2**20
TEMPLATE_MAX_BYTES = 2**20
TEMPLATE_FILE = "chat_template.jinja"
CONFIG_FILE = "tokenizer_config.json"


class ChatTemplate:
    """``render(messages)``: the prompt text for ``messages`` with the assistant's turn opened."""

    def __init__(self, source: str, bos_token: str | None, eos_token: str | None) -> None:
        from jinja2 import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = _raise_exception
        try:
            self._template = env.from_string(source)
        except TemplateError as err:
            raise CompileAheadError(f"the model's chat template does not parse: {err}") from None
        self._special = {"bos_token": bos_token or "", "eos_token": eos_token or ""}

    def render(self, messages: Sequence[ChatMessage]) -> str:
        from jinja2 import TemplateError

        try:
            return self._template.render(
                messages=[{"role": m.role, "content": m.content} for m in messages],
                add_generation_prompt=True,
                **self._special,
            )
        except _TemplateRefusal as err:  # the template's own raise_exception: its words
            raise bad_request(
                f"messages: the model's chat template refuses them: {err}", param="messages"
            ) from None
        except TemplateError as err:
            raise bad_request(
                f"messages: the model's chat template failed on them: {err}", param="messages"
            ) from None


class _TemplateRefusal(Exception):
    pass


def _raise_exception(message: str) -> None:
    raise _TemplateRefusal(message)


def source_chat_template(source: Any) -> ChatTemplate | None:
    """The chat template of a model source: the one it names itself (``chat_template()``,
    giving the template and its special tokens, e.g. a GGUF's ``tokenizer.chat_template``,
    where sources have it), else its directory's (load_chat_template)."""
    own = getattr(source, "chat_template", None)
    found = own() if callable(own) else None
    if found is not None:
        template, special = found
        return ChatTemplate(template, special.get("bos_token"), special.get("eos_token"))
    return load_chat_template(getattr(source, "model_dir", None))


def load_chat_template(model_dir: Path | None) -> ChatTemplate | None:
    """The chat template of the model in ``model_dir``, or None when it has none."""
    if model_dir is None:
        return None
    config: dict[str, Any] = {}
    config_path = model_dir / CONFIG_FILE
    if config_path.is_file():
        text = read_input_text(config_path, str(config_path), CONFIG_MAX_BYTES)
        try:
            loaded = json.loads(text)
        except json.JSONDecodeError as err:
            raise CompileAheadError(f"{config_path}: not JSON ({err})") from None
        if isinstance(loaded, dict):
            config = loaded
    template_path = model_dir / TEMPLATE_FILE
    if template_path.is_file():
        source: Any = read_input_text(template_path, str(template_path), TEMPLATE_MAX_BYTES)
    else:
        source = config.get("chat_template")
        if isinstance(source, list):  # named templates: the default one
            named = {t.get("name"): t.get("template") for t in source if isinstance(t, dict)}
            source = named.get("default")
    if not isinstance(source, str) or not source.strip():
        return None
    return ChatTemplate(source, _token(config.get("bos_token")), _token(config.get("eos_token")))


def _token(value: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or {"content": ...}."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None
