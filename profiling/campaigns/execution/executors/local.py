"""The local executor: one block at a time on this machine, in the coordinator's process (no
dependency beyond compile-ahead)."""

from __future__ import annotations

import socket
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from compile_ahead.profiling.campaigns.execution.block import BlockTask, run_block
from compile_ahead.profiling.campaigns.execution.block_dirs import check_blocks_folder
from compile_ahead.profiling.campaigns.execution.coordinator import Hooks


class LocalExecutor:
    name = "local"
    parallelism = 1

    def __init__(self, work_root: Path):
        self.work_root = work_root  # the blocks' folder, beside the store (block_dirs.py)

    def preflight(self, identities: dict[tuple[str, str | None], dict]) -> None:
        """The blocks' folder, if one is there already, is this user's private one (before
        the store is written); the models need no check: this machine runs the blocks."""
        check_blocks_folder(self.work_root)

    def prepare(self, task: BlockTask) -> BlockTask:
        return replace(task, work_root=str(self.work_root))

    def run(self, tasks: Iterable[BlockTask], hooks: Hooks) -> None:
        check_blocks_folder(self.work_root, create=True)  # made now: the store is used
        node = f"local:{socket.gethostname()}"
        for task in tasks:
            if hooks.skip(task):
                continue
            row = hooks.submitted(task)
            hooks.finished(task, row, run_block(self.prepare(task), node))

    def close(self) -> None:
        pass
