"""Ctrl-C and SIGTERM reach the main thread promptly, whichever thread the kernel hands them to.

Python runs signal handlers in the main thread only. A process-directed signal may be
delivered to any thread that does not block it (the kernel passes over the main thread while
it blocks signals, e.g. around a vfork in subprocess, or has another signal pending); on a
helper thread it sets Python's flag but does not interrupt a blocking call in the main thread,
which then sleeps until that call returns on its own: up to the 600 s deadline of a compile
worker's reply. Two guards: helper threads block both signals from their start (the kernel
then picks the main thread), and the main thread's long waits are cut into slices of
WAIT_SLICE_S, after each of which Python acts on a pending signal (threads made by libraries,
e.g. OpenVINO's, cannot be guarded the first way).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from typing import TypeVar

INTERRUPT_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM})
# Longest a main-thread wait goes without looking at a pending signal: a Ctrl-C delivered to
# another thread takes effect within this.
WAIT_SLICE_S = 0.2

T = TypeVar("T")


def block_interrupts() -> None:
    """Called first thing in a helper thread (and inherited by the threads it starts)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, INTERRUPT_SIGNALS)


def unblock_interrupts() -> None:
    """In a process started from a helper thread, which inherits its blocked signals."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, INTERRUPT_SIGNALS)


def start_helper_thread(target: Callable[[], object], name: str) -> threading.Thread:
    """A daemon thread that never takes Ctrl-C or SIGTERM from the main thread."""

    def run() -> None:
        block_interrupts()
        target()

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread


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
