"""Cluster side of tests/test_campaigns_ray.py, run inside a loopback-only network namespace.

    python campaign_cluster_driver.py CONFIG.json

Starts a Ray cluster of two simulated nodes (each with its own Hugging Face cache: node 0's
holds the model `test/tiny`, node 1's does not), then runs the coordinator (`compile-ahead
campaign run --executor ray`) twice: on a campaign of `test/tiny` (refused before anything is
written), and on the sleeping campaign, killing the node of the first block seen in flight.
Writes what it saw to CONFIG's "result" path for the test to check against the store.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from compile_ahead.profiling.campaigns.testbed import node_of, start_cluster

DEADLINE_S = 900.0


def coordinator(spec: str, store: str, address: str) -> list[str]:
    return [sys.executable, "-m", "compile_ahead.cli", "campaign", "run", spec, "--store",
            store, "--executor", "ray", "--address", address]  # fmt: skip


def first_block_in_flight(cache: Path, proc: subprocess.Popen, deadline: float) -> dict | None:
    """The first block seen started, or None if the coordinator ended first."""
    while time.monotonic() < deadline and proc.poll() is None:
        found = sorted(cache.glob("campaigns/*/cell*/b*/node.json"))
        if found:
            return json.loads(found[0].read_text()) | {"workdir": str(found[0].parent)}
        time.sleep(0.1)
    return None


def main(config_path: str) -> int:
    config = json.loads(Path(config_path).read_text())
    cache = Path(config["cache"])
    os.environ["COMPILE_AHEAD_CACHE_DIR"] = str(cache)
    cluster = start_cluster(
        2, [{"HF_HUB_CACHE": config["hub_a"]}, {"HF_HUB_CACHE": config["hub_b"]}]
    )
    result: dict = {}
    try:
        # RAY_BACKEND_LOG_LEVEL: no warning that the namespace has no route to the internet
        env = os.environ | {"HF_HUB_CACHE": config["hub_a"], "RAY_BACKEND_LOG_LEVEL": "error"}
        bad = subprocess.run(
            coordinator(config["missing_spec"], config["missing_store"], cluster.address),
            env=env, capture_output=True, text=True, timeout=DEADLINE_S,
        )  # fmt: skip
        result["missing"] = {"returncode": bad.returncode, "stderr": bad.stderr}
        deadline = time.monotonic() + DEADLINE_S
        proc = subprocess.Popen(
            coordinator(config["spec"], config["store"], cluster.address),
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        info = first_block_in_flight(cache, proc, deadline)
        if info is not None:
            time.sleep(1.0)  # inside the block: its ab process has started its trials
            cluster.remove_node(node_of(cluster, info["node"]))
            result["killed"] = info | {"at": time.time()}
        out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        result["run"] = {"returncode": proc.returncode, "stdout": out, "stderr": err}
    finally:
        cluster.shutdown()
        Path(config["result"]).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
