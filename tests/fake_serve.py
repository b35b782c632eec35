"""`compile-ahead serve` (listening) as a process, its engine tests/fake_engine.py's: the
command's own code from its parser to its exit (signals, token, limits, drain), with the
engine's start replaced, so the process tests of the endpoint need no compile. Arguments are
serve's; FAKE_STEP_S in the environment sets the fake's step time."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from compile_ahead.early_signals import note_signals

note_signals()

sys.path.insert(0, str(Path(__file__).parent))
import fake_engine  # noqa: E402

import compile_ahead.runtime.serving.api as api  # noqa: E402


def _start(source, settings):
    return fake_engine.FakeEngine(
        step_s=float(os.environ.get("FAKE_STEP_S", fake_engine.STEP_S)),
        max_context=max(settings.capacities),
        rows=max(settings.batch_sizes),
    )


api.start_engine = _start  # type: ignore[assignment]

from compile_ahead.commands.main import entry  # noqa: E402

sys.argv = ["compile-ahead", "serve", *sys.argv[1:]]
entry()
