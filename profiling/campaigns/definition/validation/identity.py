"""What defines a campaign's experiments beyond its file's text: its store's identity.

A spec names a properties file by its path and an interpreter by its path; what a block
measures depends on the file's content and the OpenVINO build the interpreter loads. The
identity holds, besides the design (kind, pairs, warm-up, timeout, arms, axes, options), per
arm its items as written, the properties each ``config=FILE`` gives the device, its ``env.``
values, its resolved compile properties and the OpenVINO build it runs (probed; an arm named by
release builds its environment per machine and is identified by the release and by each
block's fingerprint), and the content of an ``ov-config-file`` option. A resumed campaign must
have the identity its store was made with; ``identity_change`` names the first difference.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

from compile_ahead.errors import CompileAheadError
from compile_ahead.profiling.campaigns.definition.validation.arms import VERSION_PREFIX, CampaignArm
from compile_ahead.shown_text import shown

_SHOWN = 60  # characters of a value in a message


def _this_build() -> str:
    import openvino as ov

    return str(ov.get_version())


def _arm_build(arm: CampaignArm, device: str) -> str | None:
    """The OpenVINO build the arm's interpreter loads (None for an arm named by release)."""
    from compile_ahead.profiling.trials.arms import parse_arm, probe

    if arm.version is not None:
        return None
    spec = parse_arm(f"{arm.name}={','.join(arm.items)}", device)
    if spec.python == sys.executable and spec.library_path is None:
        return _this_build()
    return str(probe(spec, device)["openvino"])


def _arm_identity(arm: CampaignArm, device: str) -> dict:
    from compile_ahead.profiling.trials.arms import parse_arm
    from compile_ahead.runtime.compile.settings.properties import load_properties_file

    configs, env = {}, {}
    for item in arm.items:
        key, _, value = item.partition("=")
        if key == "config":
            configs[value] = load_properties_file(value, device, f"arm {arm.name}: config=")
        elif key.startswith("env."):
            env[key[4:]] = value
    checked = [f"python={sys.executable}" if i.startswith(VERSION_PREFIX) else i for i in arm.items]
    properties = parse_arm(f"{arm.name}={','.join(checked)}", device).config
    return {
        "items": list(arm.items),
        "config": configs,
        "env": env,
        "properties": properties,
        "openvino": _arm_build(arm, device),
    }


def campaign_identity(
    design: dict, kind: str, arms: Sequence[str], compile_arms: Sequence[CampaignArm],
    options: dict,
) -> dict:  # fmt: skip
    """The identity of a campaign: ``design`` (spec.py's canonical form of its text) with
    what its arms and option files hold and run."""
    from compile_ahead.runtime.compile.settings.properties import load_properties_file

    device = str(options.get("device", "CPU"))  # keys: `ab`'s flag names (spec_text.py)
    if kind == "compile":
        per_arm = {a.name: _arm_identity(a, device) for a in compile_arms}
    else:  # schedules, all run by this interpreter's compile-ahead
        build = _this_build()
        per_arm = {name: {"openvino": build} for name in arms}
    files = {}
    for key in ("ov-config-file",):
        if isinstance(options.get(key), str):
            files[options[key]] = load_properties_file(options[key], device, f"options.{key}")
    identity = {"design": design, "arms": per_arm, "files": files}
    return json.loads(json.dumps(identity))  # as the store holds it: tuples are lists


def _text(value: object) -> str:
    text = shown(value if isinstance(value, str) else json.dumps(value, sort_keys=True))
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def _mapping_change(old: dict, new: dict) -> str:
    """``KEY a -> b, KEY2 added v, KEY3 removed`` for two flat mappings."""
    parts = []
    for key in dict.fromkeys([*old, *new]):
        if key not in new:
            parts.append(f"{_text(key)} removed")
        elif key not in old:
            parts.append(f"{_text(key)} added {_text(new[key])}")
        elif old[key] != new[key]:
            parts.append(f"{_text(key)} {_text(old[key])} -> {_text(new[key])}")
    return ", ".join(parts)


def _arm_change(name: str, old: dict, new: dict) -> tuple[str, str] | None:
    what = f"arm {name}"
    for path in dict.fromkeys([*old.get("config", {}), *new.get("config", {})]):
        before, after = old.get("config", {}).get(path), new.get("config", {}).get(path)
        if before != after:
            diff = _mapping_change(before or {}, after or {})
            return f"{what}: config {_text(path)}", diff
    if old.get("env") != new.get("env"):
        return f"{what}: env", _mapping_change(old.get("env", {}), new.get("env", {}))
    if old.get("properties") != new.get("properties"):
        diff = _mapping_change(old.get("properties", {}), new.get("properties", {}))
        return f"{what}: properties", diff
    if old.get("openvino") != new.get("openvino"):
        before, after = _text(old.get("openvino")), _text(new.get("openvino"))
        return f"{what}: its interpreter's OpenVINO", f"{before} -> {after}"
    if old.get("items") != new.get("items"):  # e.g. another interpreter path
        return what, f"{_text(old.get('items'))} -> {_text(new.get('items'))}"
    return None


def _design_change(old: dict, new: dict) -> tuple[str, str] | None:
    for key in dict.fromkeys([*old, *new]):
        before, after = old.get(key), new.get(key)
        if before == after:
            continue
        if isinstance(before, dict) and isinstance(after, dict):
            return f"[{key}]", _mapping_change(before, after)
        return f"campaign.{key}", f"{_text(before)} -> {_text(after)}"
    return None


def identity_change(old: dict, new: dict) -> tuple[str, str] | None:
    """The first difference between a store's identity and a campaign's: (what changed, how:
    ``FROM -> TO`` or ``KEY FROM -> TO, ...``); None if they are the same."""
    old_design, new_design = old.get("design", {}), new.get("design", {})
    arms = "arms"  # compared last: an arm's own change is named first, by the arm
    change = _design_change(
        {k: v for k, v in old_design.items() if k != arms},
        {k: v for k, v in new_design.items() if k != arms},
    )
    if change is not None:
        return change
    old_arms, new_arms = old.get("arms", {}), new.get("arms", {})
    for name in new_arms:
        if name in old_arms:
            change = _arm_change(name, old_arms[name], new_arms[name])
            if change is not None:
                return change
    for path in dict.fromkeys([*old.get("files", {}), *new.get("files", {})]):
        before, after = old.get("files", {}).get(path), new.get("files", {}).get(path)
        if before != after:
            return f"file {_text(path)}", _mapping_change(before or {}, after or {})
    return _design_change({arms: old_design.get(arms)}, {arms: new_design.get(arms)})


def refusal(store: Path, change: tuple[str, str]) -> CompileAheadError:
    """The refusal of a resume whose campaign is not the store's (identity_change)."""
    what, how = change
    return CompileAheadError(
        f"{store}: {what} changed since the store was made ({how}); its blocks were measured "
        "before the change: use a new store, or undo it"
    )
