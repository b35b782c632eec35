"""``python -m compile_ahead.commands ...``: the `compile-ahead` command."""

from compile_ahead.commands.main import entry

entry()
