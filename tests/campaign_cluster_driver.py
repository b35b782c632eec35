"""Cluster side of tests/test_campaigns_ray.py, run inside a loopback-only network namespace.

    python campaign_cluster_driver.py CONFIG.json

Starts a Ray cluster of two simulated nodes, node A whose Hugging Face cache holds the model
`test/tiny` and node B whose cache does not, and runs the coordinator (`compile-ahead campaign
run --executor ray`) three times:

- missing: a campaign of `test/tiny` while B is up: refused before anything is written;
- lost: the sleeping campaign of `tiny`, killing the node of the first block seen in flight;
- late: the sleeping campaign of `test/tiny` on a node like A alone, then a node like B joins
  while a block runs: B refuses the blocks it is given, which then run on A.

Writes what it saw to CONFIG's "result" path for the test to check against the stores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from cli import command
from ray_testbed import node_of, start_cluster

from compile_ahead.profiling.campaigns.execution.executors.ray_cluster import SLOT

DEADLINE_S = 900.0


def coordinator(spec: str, store: str, address: str) -> list[str]:
    return command(
        "campaign", "run", spec, "--store", store, "--executor", "ray", "--address", address
    )


def first_block_in_flight(
    root: Path, proc: subprocess.Popen, deadline: float, earlier: frozenset[Path] = frozenset()
) -> dict | None:
    """The first block seen started under ``root`` (not of the ``earlier`` campaigns' work
    directories), or None if the coordinator ended first."""
    while time.monotonic() < deadline and proc.poll() is None:
        found = sorted(
            p for p in root.glob("campaigns/*/cell*/b*/node.json") if p.parents[2] not in earlier
        )
        if found:
            return json.loads(found[0].read_text()) | {"workdir": str(found[0].parent)}
        time.sleep(0.1)
    return None


def finish(proc: subprocess.Popen, deadline: float) -> dict:
    out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    return {"returncode": proc.returncode, "stdout": out, "stderr": err}


def add_node(cluster, hub: str):
    """A node whose workers see the Hugging Face cache ``hub``."""
    saved = os.environ.get("HF_HUB_CACHE")
    os.environ["HF_HUB_CACHE"] = hub
    try:
        node = cluster.add_node(num_cpus=1, resources={SLOT: 1})
    finally:
        if saved is None:
            os.environ.pop("HF_HUB_CACHE", None)
        else:
            os.environ["HF_HUB_CACHE"] = saved
    cluster.wait_for_nodes()
    return node


def lost(cluster, config: dict, env: dict, deadline: float) -> dict:
    proc = subprocess.Popen(
        coordinator(config["spec"], config["store"], cluster.address),
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    seen: dict = {}
    info = first_block_in_flight(Path(config["cache"]), proc, deadline)
    if info is not None:
        time.sleep(1.0)  # inside the block: its ab process has started its trials
        cluster.remove_node(node_of(cluster, info["node"]))
        seen["killed"] = info | {"at": time.time()}
    Path(config["release"]).touch()  # the blocks left need not sleep
    return seen | {"run": finish(proc, deadline)}


def late(cluster, config: dict, env: dict, deadline: float) -> dict:
    for node in list(cluster.worker_nodes):
        cluster.remove_node(node)
    a = add_node(cluster, config["hub_a"])
    cache = Path(config["cache"])
    earlier = frozenset(cache.glob("campaigns/*"))
    proc = subprocess.Popen(
        coordinator(config["late_spec"], config["late_store"], cluster.address),
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    seen: dict = {"a": a.node_id}
    if first_block_in_flight(cache, proc, deadline, earlier) is not None:
        seen["b"] = add_node(cluster, config["hub_b"]).node_id
    return seen | {"run": finish(proc, deadline)}


def main(config_path: str) -> int:
    config = json.loads(Path(config_path).read_text())
    os.environ["COMPILE_AHEAD_CACHE_DIR"] = config["cache"]
    cluster = start_cluster(
        2, [{"HF_HUB_CACHE": config["hub_a"]}, {"HF_HUB_CACHE": config["hub_b"]}]
    )
    env = os.environ | {"HF_HUB_CACHE": config["hub_a"]}
    deadline = time.monotonic() + DEADLINE_S
    result: dict = {}
    try:
        missing = subprocess.run(
            coordinator(config["missing_spec"], config["missing_store"], cluster.address),
            env=env, capture_output=True, text=True, timeout=DEADLINE_S,
        )  # fmt: skip
        result["missing"] = {"returncode": missing.returncode, "stderr": missing.stderr}
        result["lost"] = lost(cluster, config, env, deadline)
        result["late"] = late(cluster, config, env, deadline)
    finally:
        cluster.shutdown()
        Path(config["result"]).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
