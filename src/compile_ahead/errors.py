"""The one exception type users see for bad input: the message names the problem."""


class CompileAheadError(Exception):
    """Bad input or an unsupported setup, reported to the user as a one-line message."""
