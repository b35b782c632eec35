"""The one exception type users see for bad input: the message names the problem."""


class CompileAheadWarning(UserWarning):
    """Something the user should know that does not stop the command (e.g. the compile cache
    could not be used): the commands print it as one line, without a source line."""


class CompileAheadError(Exception):
    """Bad input or an unsupported setup, reported to the user as a one-line message."""
