"""A Ray cluster of simulated nodes on this machine, for the engine's tests and benchmarks.

Ray listens on every interface and advertises the machine's own address even when told to use
127.0.0.1; in a network namespace that has only loopback it has no other address to use. So a
test or benchmark runs its cluster driver inside one (``in_loopback_namespace``), which takes
root and unshare(1). Each simulated node advertises the block slot once, as a real one must.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence

from compile_ahead.profiling.campaigns.execution.executors.ray_cluster import SLOT


def loopback_unavailable() -> str | None:
    """Why a loopback-only namespace cannot be made here, or None."""
    if os.geteuid() != 0:
        return "a loopback-only network namespace needs root (unshare -n)"
    for tool in ("unshare", "ip"):
        if shutil.which(tool) is None:
            return f"a loopback-only network namespace needs {tool}, which is not installed"
    probe = subprocess.run(
        ["unshare", "-n", "sh", "-c", "ip link set lo up"], capture_output=True, text=True
    )
    if probe.returncode != 0:
        return f"unshare -n fails here: {probe.stderr.strip() or probe.returncode}"
    return None


def in_loopback_namespace(argv: Sequence[str]) -> list[str]:
    """``argv`` run in a new network namespace whose only (and up) interface is loopback."""
    return ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *argv]


def start_cluster(nodes: int, node_env: Sequence[dict[str, str]] = ()):
    """A head (no block slot) and ``nodes`` simulated nodes with one slot each; node i starts
    with ``node_env[i]`` added to its environment (its workers inherit it)."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    for i in range(nodes):
        extra = node_env[i] if i < len(node_env) else {}
        saved = {k: os.environ.get(k) for k in extra}
        os.environ.update(extra)
        try:
            cluster.add_node(num_cpus=1, resources={SLOT: 1})
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    cluster.wait_for_nodes()
    return cluster


def node_of(cluster, node_id: str):
    """The simulated node with Ray's ``node_id``."""
    for node in cluster.worker_nodes:
        if node.node_id == node_id:
            return node
    raise KeyError(node_id)
