"""The `run` and `generate` commands and the options every command shares."""
