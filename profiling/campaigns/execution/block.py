"""One block of one cell, run on this machine: the cell's `ab` command with ``--pairs 1
--first-block B``, so the block runs each arm once in the order the cell's design gives block
B, after the campaign's warm-ups (on this machine, since a block may land on any node).

Before running, the block checks that this machine sees the cell's model with the campaign's
identity (else it is refused, not run) and builds the environments of arms named by version.
What it returns is plain JSON (it crosses to the coordinator from a Ray node): the block's
experiment.json and trial records as `ab` wrote them, each trial's command, environment and
files, the machine's fingerprint, and where and when it ran.
"""

from __future__ import annotations

import json
import socket
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

from compile_ahead.errors import CompileAheadError
from compile_ahead.profiling.campaigns.definition.environments import ensure_environment
from compile_ahead.profiling.campaigns.definition.spec import block_flags, compile_arm_flags
from compile_ahead.profiling.campaigns.definition.validation.arms import parse_campaign_arm
from compile_ahead.profiling.campaigns.execution import child, fingerprint
from compile_ahead.profiling.campaigns.execution.block_dirs import private_folder
from compile_ahead.profiling.campaigns.execution.models import identity_difference, model_identity
from compile_ahead.runtime.compile.cache.dirs import UntrustedPath

AB_DIR = "ab"
NODE_FILE = "node.json"


@dataclass(frozen=True)
class BlockTask:
    campaign_id: str
    cell: int
    cell_dir: str
    block: int
    kind: str
    argv: tuple[str, ...]  # the cell's `ab KIND ...` (spec.Cell.argv)
    arms: tuple[str, ...]  # a compile cell's arms as the spec writes them
    arm_items: tuple[str, ...]  # properties a compile cell adds to every arm
    warmup: int
    timeout: float | None
    model: str
    synthetic_dtype: str | None
    model_identity: dict
    work_root: str | None = None  # default: the user cache's campaigns/CAMPAIGN_ID (block_dirs)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> BlockTask:
        tupled = {k: tuple(v) for k, v in data.items() if k in ("argv", "arms", "arm_items")}
        return cls(**(data | tupled))


def _workdir(task: BlockTask, node: str) -> Path:
    """A new directory per attempt (an interrupted attempt's files never mix with a rerun's),
    in the campaign's private folder (block_dirs.py); UntrustedPath or OSError if it cannot be
    made there."""
    attempt = f"b{task.block:03d}-{uuid.uuid4().hex[:8]}"
    if task.work_root is not None:
        path = private_folder(Path(task.work_root), (task.cell_dir, attempt))
    else:
        path = private_folder(None, (task.campaign_id, task.cell_dir, attempt))
    info = {"node": node, "host": socket.gethostname(), "cell": task.cell, "block": task.block}
    (path / NODE_FILE).write_text(json.dumps(info | {"started": time.time()}))
    return path


def ab_argv(task: BlockTask, out: Path) -> list[str]:
    """The block's `ab` command line on this machine (versions resolved to environments)."""
    argv = list(task.argv)
    if task.kind == "compile":
        arms = tuple(parse_campaign_arm(a, "campaign") for a in task.arms)
        python = lambda version: str(ensure_environment(version))  # noqa: E731
        argv += compile_arm_flags(arms, task.arm_items, python)
        ir_key = json.dumps([task.model, task.synthetic_dtype])
        ir_dir = private_folder(None, ("ir", uuid.uuid5(uuid.NAMESPACE_URL, ir_key).hex))
        argv += ["--ir-dir", str(ir_dir)]  # exported once per machine and model, reused
    argv += block_flags(1, task.warmup, task.block, task.timeout)
    return [*argv, "--out", str(out)]


@lru_cache(maxsize=4)
def _interpreter_build(python: str, device: str) -> str:
    from compile_ahead.profiling.trials.arms import ArmSpec, probe

    return str(probe(ArmSpec("node", python), device)["openvino"])


def openvino_builds(kind: str, experiment: dict | None) -> dict[str, str]:
    """arm -> the OpenVINO build its trials load: a compile arm's as `ab` probed it; a schedule
    arm runs this interpreter's."""
    arms = (experiment or {}).get("arms", [])
    if kind == "compile":
        return {a["name"]: str(a.get("openvino", "?")) for a in arms}
    try:
        build = _interpreter_build(sys.executable, str((experiment or {}).get("device", "CPU")))
    except CompileAheadError as err:
        build = f"unknown ({err})"
    return {a["name"]: build for a in arms}


def _fill(part: str, values: dict[str, str]) -> str:
    for key, value in values.items():
        part = part.replace("{" + key + "}", value)
    return part


def _trial(record: dict, arms: dict[str, dict], ab_dir: Path) -> dict:
    """A trial record with what ran: its command (placeholders filled), environment, files."""
    arm = arms.get(record["arm"], {})
    result = Path(record["result_path"])
    values = {"out": str(result), "arm": record["arm"], "index": str(record["index"])}
    artifacts = [
        {"path": str(p), "bytes": p.stat().st_size}
        for p in sorted(ab_dir.glob(f"{result.name}*"))
        if p.is_file()
    ]
    return record | {
        "command": [_fill(str(p), values) for p in arm.get("command", [])],
        "env": {"set": arm.get("env", {}), "unset": arm.get("unset_env", [])},
        "artifacts": artifacts,
    }


def _read_back(ab_dir: Path) -> tuple[dict | None, list[dict], list[str]]:
    from compile_ahead.profiling.results_format.experiment import EXPERIMENT
    from compile_ahead.profiling.results_format.records import load_records

    exp = None
    if (ab_dir / EXPERIMENT).is_file():
        exp = json.loads((ab_dir / EXPERIMENT).read_text())
    warnings: list[str] = []
    records = [] if exp is None else [r.to_dict() for r in load_records(ab_dir, warnings.append)]
    return exp, records, warnings


def _outcome(code: int, workdir: Path, records: list[dict], expected: int) -> str | None:
    """None for a complete block, else one line saying why it is not."""
    if code != 0:
        said = child.last_line(workdir / "ab.err") or "no output"
        return f"ab exited {code}: {said}"
    if len(records) != expected or any(r["error"] is not None for r in records):
        return f"ab recorded {len(records)} of {expected} trials"
    return None


def _refusal(task: BlockTask) -> str | None:
    try:
        found = model_identity(task.model, task.synthetic_dtype)
    except CompileAheadError as err:
        return str(err)
    if found != task.model_identity:
        return (
            f"model {task.model} on {socket.gethostname()} is not the campaign's "
            f"({identity_difference(task.model_identity, found)})"
        )
    return None


def run_block(task: BlockTask, node: str) -> dict:
    """Run the block here; a JSON result whatever happens short of our own death."""
    started = time.time()
    base = {"node": node, "host": socket.gethostname(), "started": started}
    refused = _refusal(task)
    if refused is not None:
        return base | {"status": "refused", "error": refused, "ended": time.time()}
    try:
        workdir = _workdir(task, node)
    except (OSError, UntrustedPath) as err:  # a full disk, a folder another user made
        return base | {"status": "failed", "error": f"cannot write the block's files: {err}",
                       "ended": time.time()}  # fmt: skip
    base["workdir"] = str(workdir)
    try:
        command = child.compile_ahead_command(ab_argv(task, workdir / AB_DIR))
    except (OSError, UntrustedPath) as err:  # the IR folder
        return base | {"status": "failed", "error": f"cannot write the model's IR: {err}",
                       "ended": time.time()}  # fmt: skip
    except CompileAheadError as err:  # an environment that cannot be built, a missing path
        return base | {"status": "failed", "error": str(err), "ended": time.time()}
    code = child.run_guarded(command, workdir)
    ended = time.time()
    exp, records, warnings = _read_back(workdir / AB_DIR)
    arms = {a["name"]: a for a in (exp or {}).get("arms", [])}
    expected = len(arms or task.arms or [0, 0]) * (task.warmup + 1)
    error = _outcome(code, workdir, records, expected)
    return base | {
        "status": "failed" if error else "done",
        "error": error,
        "ended": ended,
        "exit": code,
        "command": command,
        "experiment": exp,
        "trials": [_trial(r, arms, workdir / AB_DIR) for r in records],
        "warnings": warnings,
        "fingerprint": fingerprint.fingerprint(openvino_builds(task.kind, exp)),
    }
