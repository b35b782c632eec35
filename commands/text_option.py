"""`run --text FILE`: a document's tokens teacher-forced through the ladder and scored (NLL and
perplexity per rung), instead of a prompt. The file is read as every input file is (a regular
file, bounded); the model's tokenizer encodes it once the model is open."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from compile_ahead.errors import CompileAheadError
from compile_ahead.output.input_files import read_input_text

if TYPE_CHECKING:
    from compile_ahead.runtime.ladder.settings.config import Prompt

# --text: at most this much text (the seed's 8,193 tokens are some 40 KB of English).
TEXT_MAX_BYTES = 4 * 2**20
# Flags that give what --text gives (the prompt, or tokens to generate).
CONFLICTS = {
    "prompt": "--prompt",
    "prompt_ids": "--prompt-ids",
    "prompts": "--prompts",
    "max_new_tokens": "--max-new-tokens",
}


def add_text_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--text",
        type=Path,
        default=None,
        metavar="FILE",
        help="teacher-force this text file's tokens (the model's tokenizer) through the ladder "
        "and report their negative log-likelihood and perplexity per rung: its first "
        "--prompt-len tokens are the prompt, --decode-tokens T forces only the T after it "
        "(default: to the text's end, which the top rung must hold)",
    )


def text_prompts(args: argparse.Namespace) -> tuple[Prompt, ...] | None:
    """RunConfig's ``prompts`` for --text (one per sequence, each the whole text), or None
    without it; its conflicting flags refused before the file is read."""
    path = getattr(args, "text", None)
    if path is None:
        return None
    given = [flag for name, flag in CONFLICTS.items() if getattr(args, name, None)]
    if given:
        raise CompileAheadError(
            f"--text forces a file's tokens, its first --prompt-len the prompt: not with "
            f"{' and '.join(given)}"
        )
    length = getattr(args, "prompt_len", None)
    if isinstance(length, tuple):
        raise CompileAheadError(
            "--text: one --prompt-len for every sequence (each is fed the same text)"
        )
    what = f"--text {path}"
    text = read_input_text(path, what, TEXT_MAX_BYTES)
    if not text.strip():
        raise CompileAheadError(f"{what}: empty (no text to force)")
    from compile_ahead.runtime.ladder.settings.config import Prompt

    batch = getattr(args, "batch", None)
    prompt = Prompt(length, origin=what, document=text)
    return (prompt,) * (batch if isinstance(batch, int) else 1)
