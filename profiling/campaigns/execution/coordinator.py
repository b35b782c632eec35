"""Run a campaign: validate it whole, take the store's lock, run every block not yet done on an
executor, commit each block as it ends, and print a progress line with an ETA.

Order of work, so that a refusal writes nothing: the spec and every cell (spec.py), each model's
identity here, the lock of a store that exists (store_lock.py), the executor's own checks (a
Ray node's models, the local blocks' folder), and only then the store, created locked.
A block whose `ab` failed before any trial (a setting `ab` refused, an environment that
cannot be built) would fail alike in every block of its cell: the cell's other blocks are left
for the next run instead.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TextIO

from compile_ahead.errors import CompileAheadError
from compile_ahead.output.checks import check_output_file
from compile_ahead.profiling.campaigns.definition.spec import CampaignSpec
from compile_ahead.profiling.campaigns.execution.block import BlockTask
from compile_ahead.profiling.campaigns.execution.models import model_identity
from compile_ahead.profiling.campaigns.persistence.store import Store
from compile_ahead.profiling.campaigns.persistence.store_lock import HOLDER_KEY, CoordinatorLock
from compile_ahead.shown_text import shown


class Hooks(Protocol):
    def skip(self, task: BlockTask) -> bool: ...

    def submitted(self, task: BlockTask) -> int: ...

    def finished(self, task: BlockTask, row: int, result: dict, again: bool = False) -> None: ...


class Executor(Protocol):
    name: str

    @property
    def parallelism(self) -> int: ...

    def preflight(self, identities: dict[tuple[str, str | None], dict]) -> None: ...

    def run(self, tasks: Iterable[BlockTask], hooks: Hooks) -> None: ...

    def close(self) -> None: ...


def duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


@dataclass
class Recorder:
    """The executor's hooks: the store's rows, the progress line, the cells left for later."""

    store: Store
    spec: CampaignSpec
    executor: Executor
    stream: TextIO
    quiet: bool = False
    done: int = 0
    failed: int = 0
    walls: list[float] = field(default_factory=list)
    in_flight: set[int] = field(default_factory=set)
    skipped: dict[int, str] = field(default_factory=dict)

    def say(self, text: str) -> None:
        if not self.quiet:
            print(f"campaign: {shown(text)}", file=self.stream, flush=True)

    def skip(self, task: BlockTask) -> bool:
        return task.cell in self.skipped

    def submitted(self, task: BlockTask) -> int:
        row = self.store.submit(task.cell, task.block)
        self.in_flight.add(row)
        if self.executor.name == "local":
            self.say(f"{task.cell_dir} block {task.block} running ...")
        return row

    def finished(self, task: BlockTask, row: int, result: dict, again: bool = False) -> None:
        self.store.commit(row, result)
        self.in_flight.discard(row)
        where = f"{task.cell_dir} block {task.block}"
        host = result.get("host", "?")
        if self.executor.name != "local" and result.get("node"):
            host += f" (node {str(result['node'])[:8]})"
        if result["status"] == "done":
            self.done += 1
            self.walls.append(result["ended"] - result["started"])
            self.say(f"{where} done on {host} in {self.walls[-1]:.0f} s · {self.progress()}")
            return
        if again:
            self.say(f"{where} refused by {host}: {result['error']}; sent to another node")
            return
        self.failed += 1
        self.say(f"{where} FAILED on {host}: {result['error']} · {self.progress()}")
        if not result.get("trials") and result.get("workdir"):
            self.skipped[task.cell] = result["error"]
            self.say(
                f"{task.cell_dir}: failed before any trial; its other blocks wait for the next run"
            )

    def remaining(self) -> int:
        return self.spec.blocks - len(self.store.done())

    def progress(self) -> str:
        left = self.remaining()
        text = f"{self.spec.blocks - left}/{self.spec.blocks} blocks done"
        if self.failed:
            text += f", {self.failed} failed"
        if left and self.walls:
            eta = left * (sum(self.walls) / len(self.walls)) / self.executor.parallelism
            text += f" · ETA {duration(eta)}"
        return text


def block_tasks(
    spec: CampaignSpec, campaign_id: str, identities: dict[int, dict], done: set[tuple[int, int]]
) -> Iterator[BlockTask]:
    """The blocks not yet done, block by block across the cells (every cell gets its first
    pairs early, and slow drift of the machines spreads over all cells alike); made one at a
    time as the executor takes them, so a large grid is never held whole."""
    return (
        BlockTask(
            campaign_id,
            cell.index,
            cell.dirname,
            block,
            spec.kind,
            cell.argv,
            spec.arms if spec.kind == "compile" else (),
            cell.arm_items,
            spec.warmup,
            spec.timeout,
            cell.model,
            cell.synthetic_dtype,
            identities[cell.index],
        )
        for block in range(spec.pairs)
        for cell in spec.cells
        if (cell.index, block) not in done
    )


def identities_of(spec: CampaignSpec) -> dict[tuple[str, str | None], dict]:
    """Each model of the campaign as this machine sees it (one line if it cannot)."""
    out: dict[tuple[str, str | None], dict] = {}
    for cell in spec.cells:
        key = (cell.model, cell.synthetic_dtype)
        if key not in out:
            try:
                out[key] = model_identity(*key)
            except CompileAheadError as err:
                raise CompileAheadError(f"{spec.path}: {err}") from None
    return out


def _open_store(
    path: Path, spec: CampaignSpec, cells: dict[int, dict], lock: CoordinatorLock
) -> Store:
    """The store, locked by ``lock`` (taken already for a store that existed) and holding
    this campaign; the coordinator's name written in it."""
    if lock.held:
        store = Store.open(path)
    else:
        check_output_file(path, "--store")
        store = Store.create(path, spec, cells, lock)
    try:
        lock.check_same(path)
        store.check_spec(spec, cells)
        holder = f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%c')}"
        store.set_meta({HOLDER_KEY: holder})
    except BaseException:
        store.close()
        raise
    return store


def run_campaign(
    spec: CampaignSpec,
    store_path: Path,
    make_executor: Callable[[], Executor],
    quiet: bool = False,
    stream: TextIO | None = None,
) -> int:
    """Run (or resume) ``spec`` (spec.load_spec) into the store at ``store_path``."""
    stream = stream or sys.stderr
    by_model = identities_of(spec)
    cells = {c.index: by_model[(c.model, c.synthetic_dtype)] for c in spec.cells}
    if not store_path.parent.is_dir():
        raise CompileAheadError(f"--store {store_path}: {store_path.parent} is not a directory")
    lock = CoordinatorLock(store_path)
    if os.path.lexists(store_path):
        lock.acquire()  # an existing store: refused now if it is not one, or is in use
    executor = store = None
    try:
        executor = make_executor()
        executor.preflight(by_model)
        store = _open_store(store_path, spec, cells, lock)
        return _run(store, spec, cells, executor, quiet, stream)
    finally:
        if executor is not None:
            executor.close()
        if store is not None:
            store.close()  # before the lock: see CoordinatorLock
        lock.release()


def _run(
    store: Store,
    spec: CampaignSpec,
    cells: dict[int, dict],
    executor: Executor,
    quiet: bool,
    stream: TextIO,
) -> int:
    t0 = time.monotonic()
    interrupted = store.mark_interrupted()
    done = store.done()
    tasks = block_tasks(spec, store.campaign.campaign_id, cells, done)
    to_run = spec.blocks - len(done)  # a done row is one (cell, block) of this grid
    endpoints = spec.report_endpoints and list(spec.report_endpoints)
    store.set_meta(
        {
            "executor": executor.name,
            "parallelism": str(executor.parallelism),
            "report_endpoints": json.dumps(endpoints),
        }
    )
    rec = Recorder(store, spec, executor, stream, quiet)
    rec.say(
        f"{spec.name}: {len(spec.cells)} cell(s) x {spec.pairs} pair(s); {len(done)} of "
        f"{spec.blocks} blocks done before"
        + (f", {interrupted} interrupted block(s) run again" if interrupted else "")
        + f"; {to_run} to run on {executor.parallelism} node(s) ({executor.name})"
    )
    try:
        executor.run(tasks, rec)
    except BaseException:
        store.interrupt(sorted(rec.in_flight))
        raise
    rec.say(f"{rec.progress()} after {duration(time.monotonic() - t0)} in this run")
    if rec.failed:
        raise CompileAheadError(
            f"{rec.failed} block(s) failed in this run (compile-ahead campaign status "
            f"{store.path} lists them); run the campaign again to retry them"
        )
    return 0
