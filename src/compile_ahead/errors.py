"""The one exception type users see for bad input: the message names the problem."""


class CompileAheadWarning(UserWarning):
    """Something the user should know that does not stop the command (e.g. the compile cache
    could not be used): the commands print it as one line, without a source line."""


class CompileAheadError(Exception):
    """Bad input or an unsupported setup, reported to the user as a one-line message."""


class OutputWriteError(CompileAheadError):
    """An output file could not be written (disk full, read-only, no permission): the message
    names the file and the reason; whatever was partly written is already removed."""


def write_error(path: object, err: OSError) -> OutputWriteError:
    """One line for a failed write of ``path``: the file and the system's reason."""
    reason = err.strerror or str(err)
    return OutputWriteError(f"{path}: could not be written: {reason}")
