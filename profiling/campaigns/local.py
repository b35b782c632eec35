"""The local executor: one block at a time on this machine, in the coordinator's process (no
dependency beyond compile-ahead)."""

from __future__ import annotations

import socket
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from compile_ahead.profiling.campaigns.block import BlockTask, run_block
from compile_ahead.profiling.campaigns.coordinator import Hooks


class LocalExecutor:
    name = "local"
    parallelism = 1

    def __init__(self, work_root: Path):
        self.work_root = work_root  # the blocks' directories, beside the store

    def preflight(self, identities: dict[tuple[str, str | None], dict]) -> None:
        """Nothing to ask: the coordinator's machine is the one that runs the blocks."""

    def prepare(self, task: BlockTask) -> BlockTask:
        return replace(task, work_root=str(self.work_root))

    def run(self, tasks: Iterable[BlockTask], hooks: Hooks) -> None:
        node = f"local:{socket.gethostname()}"
        for task in tasks:
            if hooks.skip(task):
                continue
            row = hooks.submitted(task)
            hooks.finished(task, row, run_block(self.prepare(task), node))

    def close(self) -> None:
        pass
