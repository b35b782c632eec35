"""The Ray executor (optional extra [cluster]): each block one Ray task that takes a whole node.

Every node of the cluster advertises the custom resource ``node_slot`` once (``ray start
--resources='{"node_slot": 1}'``) and every block task asks for it, so no two blocks ever share
a machine (a co-tenant would slow the arms of a pair unequally). The coordinator keeps one task
per node in flight and records each block when its task returns; a task whose node dies is
rerun elsewhere by Ray (``max_retries``), and since only a returned result is recorded, no trial
is recorded twice. Before anything is written, each node is asked for its machine and for the
identity of every model of the campaign: a node that cannot see one as the coordinator does is
refused with one line. A node that joins later and lacks a model refuses its block; the blocks
of that model are then sent to the other nodes only (a ``ray.io/node-id`` label selector).

Joining a cluster is bounded (``connect_timeout_s``): Ray's own client keeps retrying an address
where no cluster answers for many minutes, so the join runs on a helper thread that is given up
when the time is up (the command then ends, one line saying the cluster cannot be reached).
Blocks are taken from the coordinator's (lazy) task iterator only as nodes free up.
"""

from __future__ import annotations

import socket
import time
from collections import deque
from collections.abc import Iterable
from concurrent.futures import wait as wait_futures
from types import ModuleType
from typing import TYPE_CHECKING

from compile_ahead.errors import CompileAheadError
from compile_ahead.interrupts import WAIT_SLICE_S, in_background
from compile_ahead.profiling.campaigns.execution import fingerprint
from compile_ahead.profiling.campaigns.execution.block import BlockTask, run_block
from compile_ahead.profiling.campaigns.execution.coordinator import Hooks
from compile_ahead.profiling.campaigns.execution.models import identity_difference, model_identity

if TYPE_CHECKING:
    from ray import ObjectRef

SLOT = "node_slot"
DEFAULT_RETRIES = 3
DEFAULT_CONNECT_TIMEOUT_S = 30.0  # longest wait for a cluster at an address to answer
_NODES_EVERY_S = 5.0


def _block_task(payload: dict) -> dict:
    """On a node: run one block (the function Ray ships by reference)."""
    import ray

    return run_block(BlockTask.from_json(payload), ray.get_runtime_context().get_node_id())


def _probe_node(models: list[tuple[str, str | None]]) -> dict:
    """On a node: its machine and what it sees of each model."""
    import ray

    seen: dict[str, dict] = {}
    for name, dtype in models:
        try:
            seen[f"{name}|{dtype}"] = model_identity(name, dtype)
        except CompileAheadError as err:
            seen[f"{name}|{dtype}"] = {"error": str(err)}
    node = ray.get_runtime_context().get_node_id()
    return {
        "node": node,
        "host": socket.gethostname(),
        "machine": fingerprint.machine(),
        "models": seen,
    }


def _join(ray: ModuleType, address: str, timeout_s: float, options: dict) -> None:
    """``ray.init(address=...)``, or one line if the cluster does not answer within
    ``timeout_s`` (the join left running on its helper thread; the process ends soon after)."""
    joined = in_background(lambda: ray.init(address=address, **options), "ray-join")
    deadline = time.monotonic() + timeout_s
    while not joined.done():
        left = deadline - time.monotonic()
        if left <= 0:
            raise CompileAheadError(
                f"--address {address}: the Ray cluster cannot be reached: no answer within "
                f"{timeout_s:g} s (--connect-timeout); is its head running at that address?"
            )
        wait_futures([joined], timeout=min(WAIT_SLICE_S, left))
    joined.result()


def _ray() -> ModuleType:
    try:
        import ray
    except ImportError:
        raise CompileAheadError(
            "--executor ray needs Ray: pip install 'compile-ahead[cluster]'"
        ) from None
    return ray


class RayExecutor:
    name = "ray"

    def __init__(
        self,
        address: str | None,
        retries: int = DEFAULT_RETRIES,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
    ):
        ray = self.ray = _ray()
        quiet = {"logging_level": "ERROR", "log_to_driver": False}
        try:
            if address:
                _join(ray, address, connect_timeout_s, quiet)
            else:  # a one-node Ray on this machine
                ray.init(resources={SLOT: 1}, include_dashboard=False, **quiet)
        except (ConnectionError, RuntimeError, ValueError) as err:
            raise CompileAheadError(
                f"--address {address}: cannot join the Ray cluster ({err})"
            ) from None
        self._remote = ray.remote(_block_task)
        self._options = {
            "num_cpus": 0,
            "resources": {SLOT: 1},
            "max_retries": retries,
            "retry_exceptions": False,
        }
        self._nodes: list[dict] = []
        self._nodes_at = 0.0

    def slot_nodes(self) -> list[dict]:
        """The live nodes that run blocks, refreshed every few seconds."""
        if time.monotonic() - self._nodes_at > _NODES_EVERY_S or not self._nodes:
            self._nodes = [
                n for n in self.ray.nodes() if n.get("Alive") and n["Resources"].get(SLOT)
            ]
            self._nodes_at = time.monotonic()
        return self._nodes

    @property
    def parallelism(self) -> int:
        return max(1, len(self.slot_nodes()))

    def preflight(self, identities: dict[tuple[str, str | None], dict]) -> None:
        nodes = self.slot_nodes()
        if not nodes:
            raise CompileAheadError(
                f"no node of the Ray cluster advertises the {SLOT} resource: start each node "
                f"with ray start --resources='{{\"{SLOT}\": 1}}'"
            )
        for n in nodes:
            if n["Resources"][SLOT] != 1:
                raise CompileAheadError(
                    f"node {n['NodeManagerAddress']} ({n['NodeID'][:8]}) advertises {SLOT} "
                    f"{n['Resources'][SLOT]:g}; each node must advertise it once, so a block has "
                    "its machine to itself"
                )
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        probe = self.ray.remote(_probe_node)
        refs = [
            probe.options(
                num_cpus=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False),
            ).remote(list(identities))
            for n in nodes
        ]
        for answer in self._get_all(refs):
            _check_node(answer, identities)

    def _get_all(self, refs: list) -> list:
        pending = list(refs)
        while pending:
            _, pending = self.ray.wait(pending, num_returns=len(pending), timeout=WAIT_SLICE_S)
        return self.ray.get(refs)

    def _submit(self, task: BlockTask, avoid: set[str]) -> ObjectRef:
        options = dict(self._options)
        if avoid:
            options["label_selector"] = {"ray.io/node-id": f"!in({','.join(sorted(avoid))})"}
        return self._remote.options(**options).remote(task.to_json())

    def run(self, tasks: Iterable[BlockTask], hooks: Hooks) -> None:
        fresh = iter(tasks)  # taken one by one as nodes free up, never listed whole
        resent: deque[BlockTask] = deque()  # refused blocks, sent before any new one
        in_flight: dict = {}
        avoid: dict[tuple, set[str]] = {}  # model -> nodes that refused it
        try:
            while True:
                while len(in_flight) < self.parallelism:
                    task = resent.popleft() if resent else next(fresh, None)
                    if task is None:
                        break
                    if hooks.skip(task):
                        continue
                    row = hooks.submitted(task)
                    in_flight[self._submit(task, avoid.get(_model(task), set()))] = (task, row)
                if not in_flight:
                    return
                done, _ = self.ray.wait(list(in_flight), num_returns=1, timeout=WAIT_SLICE_S)
                for ref in done:
                    task, row = in_flight.pop(ref)
                    result = self._result(ref, task)
                    again = result["status"] == "refused" and self._elsewhere(task, result, avoid)
                    if again:
                        resent.append(task)
                    hooks.finished(task, row, result, again)
        except BaseException:
            for ref in in_flight:
                self.ray.cancel(ref, force=True)
            raise

    def _result(self, ref: ObjectRef, task: BlockTask) -> dict:
        try:
            return self.ray.get(ref)
        except self.ray.exceptions.RayError as err:
            lines = [ln for ln in str(err).strip().splitlines() if ln.strip()] or ["no message"]
            return {
                "status": "failed",
                "error": f"Ray: {type(err).__name__}: {lines[-1].strip()}",
                "ended": time.time(),
            }

    def _elsewhere(self, task: BlockTask, result: dict, avoid: dict[tuple, set[str]]) -> bool:
        """Send a refused block to the other nodes; False when none is left for it."""
        refused = avoid.setdefault(_model(task), set())
        refused.add(str(result.get("node")))
        self._nodes_at = 0.0
        return any(n["NodeID"] not in refused for n in self.slot_nodes())

    def close(self) -> None:
        self.ray.shutdown()


def _model(task: BlockTask) -> tuple[str, str | None]:
    return (task.model, task.synthetic_dtype)


def _check_node(answer: dict, identities: dict[tuple[str, str | None], dict]) -> None:
    where = f"node {answer['host']} ({answer['node'][:8]})"
    for (name, dtype), expected in identities.items():
        found = answer["models"][f"{name}|{dtype}"]
        if "error" in found:
            reason = found["error"]
        elif found != expected:
            reason = f"model {name} differs ({identity_difference(expected, found)})"
        else:
            continue
        raise CompileAheadError(
            f"{where} cannot run the cells of model {name}: {reason}; make it visible there as "
            "on this machine, or leave that node out of the cluster"
        )
