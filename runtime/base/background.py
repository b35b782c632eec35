"""Work on a daemon thread whose result (or error) a Future hands to whoever waits for it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

T = TypeVar("T")


def in_background(work: Callable[[], T], name: str) -> Future[T]:
    """Start ``work`` now; its error is raised where the future's result is asked for. A
    daemon thread: compile_model cannot be interrupted and must not hold up the exit."""
    future: Future[T] = Future()

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(work())
        except BaseException as err:  # raised where the result is asked for
            future.set_exception(err)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future
