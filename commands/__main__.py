"""``python -m compile_ahead.commands ...``: the `compile-ahead` command."""

# First, before the command's modules load: a signal from here on ends it as interrupted.
from compile_ahead.early_signals import note_signals

note_signals()

from compile_ahead.commands.main import entry  # noqa: E402  after the signals are noted

entry()
