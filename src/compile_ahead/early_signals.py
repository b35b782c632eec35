"""The interrupt signals while a console script loads its modules: noted, acted on once its
command runs.

Until a command handles Ctrl-C, SIGTERM and SIGHUP itself (interrupts.handle_interrupts), a
Ctrl-C would raise KeyboardInterrupt inside whatever module is loading (a traceback, exit -2)
and SIGTERM or SIGHUP would kill the process without a word. Each console script calls
``note_signals`` first, before any import that takes time; a signal noted then ends the command
as interrupted (exit 130) as soon as it starts. It uses ``_signal``, the C module the
``signal`` module wraps: ``signal`` imports ``enum``, which alone takes milliseconds.
"""

# True for type checkers only (mypy reads the name): importing typing here would cost its time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal as _signal  # typeshed has no stub for _signal; signal re-exports its names
else:
    import _signal

INTERRUPT_SIGNALS = (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP)

_noted: list[int] = []


def _note(signum: int, frame: object) -> None:
    _noted.append(signum)


def note_signals() -> None:
    """From now until a command handles them, the interrupt signals are only noted; one that
    is ignored when the process starts (``nohup``) stays ignored."""
    for sig in INTERRUPT_SIGNALS:
        if _signal.getsignal(sig) != _signal.SIG_IGN:
            _signal.signal(sig, _note)


def take_noted() -> int | None:
    """The first signal noted while the command loaded (forgotten now), or None."""
    first = _noted[0] if _noted else None
    _noted.clear()
    return first
