"""The prompt and batch flags of `run` and `generate`: what each of B sequences is fed.

The prompts are given one way: --prompt TEXT, --prompt-ids (repeated: one sequence each),
--prompts FILE (one prompt a line: token ids separated by spaces or commas, or text for the
model's tokenizer) or --prompt-len (teacher-forced; 16,40,128: one length per sequence), or
none (the default teacher-forced prompt). One prompt with --batch B feeds all B sequences.

Importing this module must not load OpenVINO (options.py's rule).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.ladder.settings.batch_bound import MAX_BATCH, check_batch_size

if TYPE_CHECKING:
    from compile_ahead.runtime.ladder.settings.config import Prompt

# A --prompts line of token ids: non-negative integers separated by spaces or commas (a
# trailing comma allowed). A line of nothing but digits, signs, commas, semicolons and blanks
# that is not that is a mistake, refused with its line number rather than read as text.
IDS_LINE = re.compile(r"^\d+(?:(?:\s*,\s*|\s+)\d+)*\s*,?$")
IDS_LIKE = re.compile(r"^[\s,;]*[-+]?\d+(?:[\s,;]+[-+]?\d+)*[\s,;]*$")
# --prompts: at most this much text (B prompts of a long context each), and B lines.
PROMPTS_MAX_BYTES = 64 * 2**20


def add_batch_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--batch",
        type=int,
        default=None,
        metavar="B",
        help="sequences stepped together through [B, C] graphs, one prompt each (default: one "
        "per prompt given)",
    )
    p.add_argument(
        "--prompts",
        type=Path,
        default=None,
        metavar="FILE",
        help="one prompt per sequence, one a line: token ids (space or comma separated) or "
        "text (needs the model's tokenizer)",
    )


def prompt_lengths(text: str) -> int | tuple[int, ...]:
    """--prompt-len: one length, or one per sequence (16,40,128)."""
    try:
        values = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an integer or comma-separated integers, got {text!r}"
        ) from None
    return values[0] if len(values) == 1 else values


def batch_sizes(text: str) -> tuple[int, ...]:
    """profile-compile's --batch: one B, or several (1,8), each once, each in 1..MAX_BATCH."""
    try:
        values = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an integer or comma-separated integers, got {text!r}"
        ) from None
    if not all(1 <= b <= MAX_BATCH for b in values):
        raise argparse.ArgumentTypeError(f"each B must be in 1..{MAX_BATCH}, got {text!r}")
    if len(set(values)) < len(values):
        raise argparse.ArgumentTypeError(f"each B once, got {text!r}")
    return values


def read_prompts_file(path: Path) -> tuple[Prompt, ...]:
    """--prompts FILE: a prompt per non-blank line (a regular file of at most
    PROMPTS_MAX_BYTES and MAX_BATCH prompts), each naming its line in its refusals."""
    from compile_ahead.output.input_files import read_input_text
    from compile_ahead.runtime.ladder.settings.config import Prompt

    text = read_input_text(path, f"--prompts {path}", PROMPTS_MAX_BYTES)
    prompts: list[Prompt] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if len(prompts) == MAX_BATCH:
            raise CompileAheadError(
                f"--prompts {path}: more than {MAX_BATCH} prompts (one per sequence, B at most "
                f"{MAX_BATCH}); line {number} is the first beyond"
            )
        origin = f"--prompts {path} line {number}"
        if IDS_LINE.match(line):
            prompts.append(
                Prompt(ids=",".join(re.split(r"[\s,]+", line.strip(", "))), origin=origin)
            )
        elif IDS_LIKE.match(line):
            raise CompileAheadError(
                f"{origin}: {line[:40]!r} looks like token ids but is not: ids are "
                "non-negative integers separated by spaces or commas"
            )
        else:  # a text line; a tokenizer encodes it once the model is known
            prompts.append(Prompt(text=line, origin=origin))
    if not prompts:
        raise CompileAheadError(f"--prompts {path} holds no prompt (one a line)")
    return tuple(prompts)


def given_prompt_flags(args: argparse.Namespace) -> list[str]:
    """The prompt flags a command line gave (PROMPT_FLAGS), in that order."""
    values = {
        "--prompt": getattr(args, "prompt", None),
        "--prompt-ids": getattr(args, "prompt_ids", None) or None,
        "--prompts": getattr(args, "prompts", None),
        "--prompt-len": getattr(args, "prompt_len", None),
    }
    return [flag for flag, value in values.items() if value is not None]


def check_one_way(args: argparse.Namespace) -> None:
    """The sequences' prompts given one way: two prompt flags are refused, whatever B."""
    given = given_prompt_flags(args)
    if len(given) > 1:
        raise CompileAheadError(
            f"give the prompts one way, not {' and '.join(given)}: text (--prompt), token "
            "ids (--prompt-ids, repeated for a batch), a file (--prompts) or teacher-forced "
            "lengths (--prompt-len)"
        )


def batch_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """RunConfig's ``prompts`` from a command's flags: one per sequence, B their count.

    Exactly one prompt flag, or none (the default teacher-forced prompt). One prompt with
    --batch B feeds every one of the B sequences that prompt; several (--prompt-ids
    repeated, --prompt-len 16,40, --prompts FILE) give one per sequence, and B must match.
    """
    from compile_ahead.commands.text_option import text_prompts
    from compile_ahead.runtime.ladder.settings.config import Prompt

    check_one_way(args)
    batch = getattr(args, "batch", None)
    if isinstance(batch, int):
        check_batch_size(batch)
    forced = text_prompts(args)  # --text: the text for every sequence
    if forced is not None:
        return {"prompts": forced}
    ids = getattr(args, "prompt_ids", None) or []
    lengths = getattr(args, "prompt_len", None)
    prompts: tuple[Prompt, ...]
    if len(ids) > 1:
        prompts = tuple(Prompt(ids=i) for i in ids)
    elif isinstance(lengths, tuple):
        prompts = tuple(Prompt(n) for n in lengths)
    elif getattr(args, "prompts", None) is not None:
        prompts = read_prompts_file(args.prompts)
    else:  # one prompt (or the default length) for every sequence
        single = Prompt(lengths, ids[0] if ids else None, getattr(args, "prompt", None))
        return {"prompts": with_chat((single,), args) * (batch if isinstance(batch, int) else 1)}
    if isinstance(batch, int) and batch != len(prompts):
        raise CompileAheadError(
            f"--batch {batch} needs {batch} prompts but {len(prompts)} were given (one prompt "
            "feeds every sequence; several give one each)"
        )
    check_batch_size(len(prompts), "the prompts given")
    return {"prompts": with_chat(prompts, args)}


def add_chat_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--chat",
        action="store_true",
        help="apply the model's chat template to each text prompt (as one user message, the "
        "assistant's turn opened)",
    )


def with_chat(prompts: tuple[Prompt, ...], args: argparse.Namespace) -> tuple[Prompt, ...]:
    """The prompts marked for the chat template when --chat is given; only text can be."""
    from dataclasses import replace

    if not getattr(args, "chat", False):
        return prompts
    for prompt in prompts:
        if prompt.text is None:
            where = prompt.origin or ("--prompt-ids" if prompt.ids else "--prompt-len")
            raise CompileAheadError(
                f"--chat applies the model's chat template to text: {where} is not text (give "
                "--prompt TEXT, or text lines in --prompts)"
            )
    return tuple(replace(p, chat=True) for p in prompts)
