"""Campaigns on a Ray cluster of two simulated nodes (Ray's own test cluster), in a network
namespace with only loopback (tests/campaign_cluster_driver.py): a node that cannot see a model
is refused before anything is written; a node killed mid-block gets its block rerun on the
other, no trial is recorded twice, blocks never overlap on a node, and the report equals
`ab report` on each cell. An address where no cluster answers is refused within the connect
timeout."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from campaign_helpers import (
    assert_each_block_done_once,
    campaign_command,
    connect,
    integrity,
    report_matches_ab,
    run,
    sleep_spec,
)

DRIVER = Path(__file__).with_name("campaign_cluster_driver.py")
SNAPSHOT = "0123456789abcdef0123456789abcdef01234567"


def _skip_reason() -> str | None:
    try:
        import ray  # noqa: F401
    except ImportError:
        return "Ray is not installed (the [cluster] extra)"
    from ray_testbed import loopback_unavailable

    return loopback_unavailable()


def _hub_with_model(hub: Path) -> None:
    """A Hugging Face cache holding the model test/tiny (what the refusal needs: its files)."""
    repo = hub / "models--test--tiny"
    (repo / "snapshots" / SNAPSHOT).mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(SNAPSHOT)
    (repo / "snapshots" / SNAPSHOT / "config.json").write_text("{}")
    (repo / "snapshots" / SNAPSHOT / "model.safetensors").write_bytes(b"weights")


@pytest.fixture(scope="module")
def cluster_run(tmp_path_factory) -> dict:
    reason = _skip_reason()
    if reason is not None:
        pytest.skip(reason)
    from ray_testbed import in_loopback_namespace

    root = tmp_path_factory.mktemp("ray-campaign")
    _hub_with_model(root / "hub-a")
    (root / "hub-b").mkdir()
    # the lost run's trials sleep until its node is killed, then the rest run at once
    spec = sleep_spec(root / "sleep.toml", seconds=3.0, release=root / "release")
    missing = sleep_spec(root / "missing.toml", seconds=3.0)
    missing.write_text(missing.read_text().replace('model = ["tiny"]', 'model = ["test/tiny"]'))
    config = {
        "cache": str(root / "cache"), "hub_a": str(root / "hub-a"), "hub_b": str(root / "hub-b"),
        "spec": str(spec), "store": str(root / "s.sqlite"), "missing_spec": str(missing),
        "missing_store": str(root / "m.sqlite"), "late_spec": str(missing),
        "late_store": str(root / "late.sqlite"), "result": str(root / "result.json"),
        "release": str(root / "release"),
    }  # fmt: skip
    (root / "config.json").write_text(json.dumps(config))
    proc = subprocess.run(
        in_loopback_namespace([sys.executable, str(DRIVER), str(root / "config.json")]),
        cwd=root, capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return config | {"root": root, "seen": json.loads((root / "result.json").read_text())}


def _our_lines(stderr: str) -> list[str]:
    """stderr without Ray's own log lines (its core warns that the namespace has no route)."""
    return [ln for ln in stderr.strip().splitlines() if not ln.startswith("[20")]


@pytest.mark.slow
def test_a_node_that_cannot_see_the_model_is_refused(cluster_run: dict) -> None:
    seen = cluster_run["seen"]["missing"]
    lines = _our_lines(seen["stderr"])
    assert seen["returncode"] == 2 and len(lines) == 1, seen["stderr"]
    assert lines[0].startswith("compile-ahead: error: node ")
    assert (
        "cannot run the cells of model test/tiny: model test/tiny: not on this machine" in lines[0]
    )
    assert not Path(cluster_run["missing_store"]).exists()


@pytest.mark.slow
def test_a_node_lost_mid_block_reruns_it_elsewhere_once(cluster_run: dict) -> None:
    seen = cluster_run["seen"]["lost"]
    assert seen["run"]["returncode"] == 0, seen["run"]["stderr"]
    store = Path(cluster_run["store"])
    assert integrity(store) == "ok"
    assert_each_block_done_once(store, cells=2, pairs=2, trials=2)
    killed = seen["killed"]
    with connect(store) as conn:
        row = conn.execute(
            "SELECT node, started FROM blocks WHERE cell = ? AND block = ? AND status = 'done'",
            (killed["cell"], killed["block"]),
        ).fetchone()
        nodes = {r[0] for r in conn.execute("SELECT node FROM blocks WHERE status = 'done'")}
    assert row["node"] != killed["node"] and row["started"] > killed["at"]
    assert killed["node"] not in nodes  # nothing the lost node ran was recorded


@pytest.mark.slow
def test_blocks_never_share_a_node(cluster_run: dict) -> None:
    with connect(Path(cluster_run["store"])) as conn:
        rows = conn.execute(
            "SELECT node, started, ended FROM blocks WHERE started IS NOT NULL "
            "ORDER BY node, started"
        ).fetchall()
    assert len(rows) == 4
    for a, b in itertools.pairwise(rows):
        if a["node"] == b["node"]:
            assert a["ended"] <= b["started"], (tuple(a), tuple(b))


@pytest.mark.slow
def test_cluster_report_equals_ab_report(cluster_run: dict) -> None:
    root: Path = cluster_run["root"]
    store = Path(cluster_run["store"])
    proc = run(campaign_command("report", str(store), "--out", str(root / "report")), root)
    assert proc.returncode == 0, proc.stderr
    assert report_matches_ab(store, root / "report", root) == 2


@pytest.mark.slow
def test_a_node_joining_without_the_model_refuses_its_block(cluster_run: dict) -> None:
    seen = cluster_run["seen"]["late"]
    assert seen["run"]["returncode"] == 0, seen["run"]["stderr"]
    assert "b" in seen, "the second node joined after the campaign ended"
    store = Path(cluster_run["late_store"])
    assert integrity(store) == "ok"
    assert_each_block_done_once(store, cells=2, pairs=2, trials=2)
    with connect(store) as conn:
        rows = conn.execute("SELECT status, node, error FROM blocks").fetchall()
    assert {r["node"] for r in rows if r["status"] == "done"} == {seen["a"]}
    refused = [r for r in rows if r["status"] == "refused"]
    assert refused and {r["node"] for r in refused} == {seen["b"]}
    assert all("model test/tiny: not on this machine" in r["error"] for r in refused)
    assert "sent to another node" in seen["run"]["stderr"]


@pytest.mark.slow
def test_an_address_without_a_cluster_is_refused_in_time(tmp_path: Path) -> None:
    reason = _skip_reason()
    if reason is not None:
        pytest.skip(reason)
    from ray_testbed import in_loopback_namespace

    spec, store = sleep_spec(tmp_path / "sleep.toml", seconds=0.1), tmp_path / "s.sqlite"
    argv = ["run", str(spec), "--store", str(store), "--executor", "ray"]
    limit = 2
    argv += ["--address", "127.0.0.1:1", "--connect-timeout", str(limit)]
    started = time.monotonic()
    proc = run(in_loopback_namespace(campaign_command(*argv)), tmp_path, timeout=180)
    took = time.monotonic() - started
    lines = _our_lines(proc.stderr)
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0] == (
        "compile-ahead: error: --address 127.0.0.1:1: the Ray cluster cannot be reached: no "
        f"answer within {limit} s (--connect-timeout); is its head running at that address?"
    )
    assert limit <= took < limit + 90  # Ray's import and the namespace under load
    assert not store.exists()


def test_without_the_flag_the_connect_timeout_is_the_documented_30_s() -> None:
    """Without --connect-timeout the executor gets the documented 30 s, which the test above
    would spend half a minute waiting out: the default is read from the parser instead."""
    from compile_ahead.commands.main import build_parser
    from compile_ahead.profiling.campaigns.execution.executors.ray_cluster import (
        DEFAULT_CONNECT_TIMEOUT_S,
    )

    argv = ["campaign", "run", "c.toml", "--store", "s.sqlite", "--executor", "ray"]
    args = build_parser().parse_args([*argv, "--address", "127.0.0.1:1"])
    assert args.connect_timeout == DEFAULT_CONNECT_TIMEOUT_S == 30.0
