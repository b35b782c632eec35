"""Ctrl-C, SIGTERM and SIGHUP: one way for every command, from its first line to its exit.

The first of these signals raises KeyboardInterrupt in the main thread: the command stops its
work, writes what it has (its report says it was interrupted) and exits 130. Where a cut would
leave something half done (a parser's imports, an observer's event, a decode step, a run's end
and its outputs) the signal is held (``hold``/``release``, ``deferred``): noted at once, acted
on after. Work that cannot be cut short (a compile cache entry being written) is waited for,
and the command says on one line what it waits for (``wait_out``); a second signal never
raises: it ends that wait at once, the waiting code gives the work up (no temporary file
left). A signal ignored when the command starts (``nohup``, a background job of a script)
stays ignored.

Python runs signal handlers in the main thread only. A process-directed signal may be
delivered to any thread that does not block it (the kernel passes over the main thread while
it blocks signals, e.g. around a vfork in subprocess, or has another signal pending); on a
helper thread it sets Python's flag but does not interrupt a blocking call in the main thread,
which then sleeps until that call returns on its own: up to the 600 s deadline of a compile
worker's reply. Two guards: helper threads block the signals from their start (the kernel
then picks the main thread), and the main thread's long waits are cut into slices of
WAIT_SLICE_S, after each of which Python acts on a pending signal (threads made by libraries,
e.g. OpenVINO's, cannot be guarded the first way).

Helper threads started here are registered while they run (``helpers_running``): a command
that ends while one still runs (compile_model cannot be stopped, and tearing the interpreter
down under it can crash) must leave the process at once (commands/running.py's exit_process).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from typing import TypeVar

from compile_ahead.early_signals import INTERRUPT_SIGNALS, take_noted

INTERRUPTED_EXIT = 130  # 128 + SIGINT, for any of the three
# Longest a main-thread wait goes without looking at a pending signal: a Ctrl-C delivered to
# another thread takes effect within this.
WAIT_SLICE_S = 0.2

T = TypeVar("T")


class _Command:
    """The state of the command this process runs (one at a time)."""

    prog = "compile-ahead"
    interrupted = False  # a first signal came (or a KeyboardInterrupt was caught)
    hurried = False  # a second one: waits for unfinished work end at once
    holding = 0  # depth of ``hold`` in the main thread: a first signal is only noted then
    held = False  # a signal came while holding: ``release`` raises KeyboardInterrupt


_command = _Command()
_helpers: set[threading.Thread] = set()
_exit_hooks: list[weakref.WeakMethod] = []
_registry_lock = threading.Lock()


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def handle_interrupts(prog: str) -> Callable[[], None]:
    """The start of a command (``prog`` names it in messages): the three signals are handled
    as the module docstring says; returns what puts the earlier handlers back. A signal that
    came while the console script loaded raises KeyboardInterrupt here."""
    _command.prog = prog
    _command.interrupted = _command.hurried = False
    _command.holding, _command.held = 0, False
    if not _in_main_thread():
        return lambda: None
    earlier = {}
    for sig in INTERRUPT_SIGNALS:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            earlier[sig] = signal.signal(sig, _on_signal)

    def restore() -> None:
        for sig, handler in earlier.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)

    noted = take_noted()  # a signal while the console script loaded (early_signals.py)
    if noted is not None:
        _on_signal(noted, None)
    return restore


def ignore_interrupts() -> None:
    """The command is over: its exit is not interrupted any more (main thread only)."""
    if _in_main_thread():
        for sig in INTERRUPT_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)


def _on_signal(signum: int, frame: object) -> None:
    if _command.interrupted:
        _command.hurried = True
        return
    _command.interrupted = True
    if _command.holding:
        _command.held = True
    else:
        raise KeyboardInterrupt


def hold() -> None:
    """From now on (until the matching ``release``) the first signal is only noted: the command
    is interrupted, waits still say so and end on a second one, but nothing is cut halfway,
    e.g. outputs being written or an observer's event. Nests; a no-op outside the main thread
    (signals raise in the main thread only)."""
    if _in_main_thread():
        _command.holding += 1


def release() -> None:
    """End a ``hold``; the outermost one raises the KeyboardInterrupt of a signal noted."""
    if not _in_main_thread():
        return
    _command.holding = max(0, _command.holding - 1)
    if _command.holding == 0 and _command.held:
        _command.held = False
        raise KeyboardInterrupt


def unhold() -> None:
    """End a ``hold`` without acting on a signal noted: the caller reports it (interrupted())."""
    if _in_main_thread():
        _command.holding = max(0, _command.holding - 1)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """``hold`` inside, ``release`` at its end: e.g. around a parser that imports libraries,
    one of which (numpy) turns an interrupt raised while it loads its C extension into an
    ImportError. An error raised inside ends the hold without acting on a signal noted."""
    hold()
    try:
        yield
    except BaseException:
        unhold()
        raise
    release()


def interrupted() -> bool:
    return _command.interrupted


def hurried() -> bool:
    """A second signal came: give up unfinished work instead of waiting for it."""
    return _command.hurried


def wait_out(
    unfinished: Callable[[], list[str]],
    wait: Callable[[float], object],
    give_up: Callable[[], object],
) -> None:
    """Wait until ``unfinished()`` (what still runs, a few words each) is empty; ``wait(s)``
    blocks for at most ``s`` seconds or until something finishes. Once the command is
    interrupted (before this wait or during it) it says once what it waits for; a second
    signal calls ``give_up`` and ends the wait."""
    said = False
    while True:
        try:
            left = unfinished()
            if not left:
                return
            if _command.interrupted:
                if _command.hurried:
                    give_up()
                    return
                if not said:
                    said = True
                    print(
                        f"{_command.prog}: interrupted: finishing {'; '.join(left)} "
                        "(Ctrl-C again to skip)",
                        file=sys.stderr,
                        flush=True,
                    )
            wait(WAIT_SLICE_S)
        except KeyboardInterrupt:  # the first signal, during this wait
            _command.interrupted = True


def at_exit(cleanup: Callable[[], object]) -> None:
    """Call the bound method ``cleanup`` when the process exits (``run_exit_hooks``) while its
    object lives, e.g. to remove temporary files that threads still write."""
    with _registry_lock:
        _exit_hooks.append(weakref.WeakMethod(cleanup))


def run_exit_hooks() -> None:
    with _registry_lock:
        hooks = [ref() for ref in _exit_hooks]
        _exit_hooks.clear()
    for hook in hooks:
        if hook is not None:
            with contextlib.suppress(Exception):
                hook()


def block_interrupts() -> None:
    """Called first thing in a helper thread (and inherited by the threads it starts)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, INTERRUPT_SIGNALS)


def unblock_interrupts() -> None:
    """In a process started from a helper thread, which inherits its blocked signals."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, INTERRUPT_SIGNALS)


def start_helper_thread(target: Callable[[], object], name: str) -> threading.Thread:
    """A daemon thread that never takes the signals from the main thread, registered while it
    runs."""

    def run() -> None:
        block_interrupts()
        _name_os_thread(name)
        try:
            target()
        finally:
            with _registry_lock:
                _helpers.discard(thread)

    thread = threading.Thread(target=run, name=name, daemon=True)
    with _registry_lock:
        _helpers.add(thread)
    try:
        thread.start()
    except BaseException:
        with _registry_lock:
            _helpers.discard(thread)
        raise
    return thread


def _name_os_thread(name: str) -> None:
    """Give the calling thread ``name`` in the OS too (Linux keeps 15 bytes): top -H, gdb and
    /proc/PID/task/*/comm then show which thread compiles or writes."""
    import ctypes

    with contextlib.suppress(AttributeError, OSError):
        ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)  # 15: PR_SET_NAME


def helpers_running() -> list[str]:
    """The names of the helper threads still running (e.g. a compile the command abandoned)."""
    with _registry_lock:
        return sorted(t.name for t in _helpers if t.is_alive())


def in_background(work: Callable[[], T], name: str) -> Future[T]:
    """Start ``work`` on a helper thread now; its result, or its error, is handed to whoever
    asks the future (with ``future_result``). A daemon thread: compile_model cannot be
    interrupted, and a compile still running must not hold up the exit."""
    future: Future[T] = Future()

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(work())
        except BaseException as err:  # raised where the result is asked for
            future.set_exception(err)

    start_helper_thread(run, name)
    return future


def future_result(future: Future[T]) -> T:
    """``future.result()``, waited for in slices so the main thread stays interruptible."""
    while not future.done():
        wait_futures([future], timeout=WAIT_SLICE_S)
    return future.result()
