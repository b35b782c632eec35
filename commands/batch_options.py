"""The batch flags of `run` and `generate`: --batch B and one prompt per sequence, given as
--prompt-ids repeated, --prompt-len with one length per sequence (16,40,128), or --prompts FILE
(one prompt a line: token ids separated by spaces or commas, or text for the model's tokenizer).

Importing this module must not load OpenVINO (options.py's rule).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compile_ahead.errors import CompileAheadError

if TYPE_CHECKING:
    from compile_ahead.runtime.ladder.config import Prompt

IDS_LINE = re.compile(r"^\s*\d+(\s*[,\s]\s*\d+)*\s*,?\s*$")


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
    """profile-compile's --batch: one B, or several (1,8), each once, each >= 1."""
    try:
        values = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an integer or comma-separated integers, got {text!r}"
        ) from None
    if min(values) < 1:
        raise argparse.ArgumentTypeError(f"each B must be >= 1, got {text!r}")
    if len(set(values)) < len(values):
        raise argparse.ArgumentTypeError(f"each B once, got {text!r}")
    return values


def read_prompts_file(path: Path) -> tuple[Prompt, ...]:
    """--prompts FILE: a prompt per non-blank line."""
    from compile_ahead.runtime.ladder.config import Prompt

    try:
        lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    except (OSError, UnicodeDecodeError) as err:
        raise CompileAheadError(f"--prompts {path}: cannot read it ({err})") from None
    prompts = tuple(
        Prompt(ids=",".join(re.split(r"[\s,]+", line.strip(", "))))
        if IDS_LINE.match(line)
        # A text line; a tokenizer encodes it once the model is known.
        else Prompt(text=line)
        for line in lines
        if line
    )
    if not prompts:
        raise CompileAheadError(f"--prompts {path} holds no prompt (one a line)")
    return prompts


def batch_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """RunConfig's batch fields from a command's flags (none for a command without --batch):
    ``batch``, ``prompts`` (one per sequence; empty for one sequence) and ``protocol`` (the
    one sequence's prompt, or the first of the batch's)."""
    from compile_ahead.runtime.ladder.config import Prompt

    if not hasattr(args, "batch"):
        return {}
    ids = getattr(args, "prompt_ids", None) or []
    lengths = getattr(args, "prompt_len", None)
    text = getattr(args, "prompt", None)
    given = {
        "--prompt-ids": [Prompt(ids=i) for i in ids] if len(ids) > 1 else None,
        "--prompt-len": [Prompt(n) for n in lengths] if isinstance(lengths, tuple) else None,
        "--prompts": (
            list(read_prompts_file(args.prompts)) if getattr(args, "prompts", None) else None
        ),
    }
    ways = [flag for flag, prompts in given.items() if prompts]
    if len(ways) > 1:
        raise CompileAheadError(f"give the batch's prompts one way, not {' and '.join(ways)}")
    if ways:
        prompts = tuple(given[ways[0]] or ())
    else:  # one prompt (or none: the default length) for one sequence
        length = lengths if isinstance(lengths, int) else None
        single = Prompt(length, ids[0] if ids else None, text)
        given_one = ids or text is not None or length is not None
        prompts = (single,) if args.batch is not None and given_one else ()
        return {"batch": args.batch, "prompts": prompts, "protocol": single}
    return {"batch": args.batch, "prompts": prompts, "protocol": prompts[0]}
