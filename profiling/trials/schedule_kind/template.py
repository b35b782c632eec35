"""The placeholders an `ab schedule --command` template may use (arms.py fills them),
in a module of their own: the command-line parser names them in its help without loading the
experiment's analysis."""

from __future__ import annotations

# {out} is where the trial writes its JSON report. At B > 1, {prompt_len} is one length per
# sequence (16,40,...) and {batch} is B.
TEMPLATE_KEYS = ("schedule", "model", "ladder", "prompt_len", "decode_tokens", "batch", "out")
