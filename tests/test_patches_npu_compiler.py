"""patches/npu_compiler: well-formed series, only the intended files, the tested header inside,
and `compile-ahead patches check` on checkouts built from the series' own hunks."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from compile_ahead.commands.main import main
from compile_ahead.errors import CompileAheadError
from compile_ahead.profiling.npu_patches import check as patches_check

ROOT = Path(__file__).resolve().parents[1]
PATCHES = ROOT / "patches" / "npu_compiler"
PIN = patches_check.Pin.load(PATCHES)
MIRROR = Path("/work/.mirror/openvinotoolkit+npu_compiler/repo")

HEADER_RE = re.compile(r"^diff --git a/(\S+) b/(\S+)$", re.M)
HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def file_diffs(patch: Path) -> dict[str, str]:
    """Path -> that file's part of the patch."""
    text = patch.read_text()
    starts = [(m.start(), m.group(2)) for m in HEADER_RE.finditer(text)]
    ends = [s for s, _ in starts[1:]] + [text.index("\n-- \n") if "\n-- \n" in text else len(text)]
    return {path: text[start:end] for (start, path), end in zip(starts, ends, strict=True)}


def hunks(diff: str) -> list[tuple[tuple[int, int, int, int], list[str]]]:
    out = []
    lines = diff.splitlines()
    i = 0
    while i < len(lines):
        m = HUNK_RE.match(lines[i])
        if not m:
            i += 1
            continue
        header = tuple(int(g) if g is not None else 1 for g in m.groups())
        body = []
        i += 1
        while i < len(lines) and lines[i][:1] in (" ", "+", "-", "\\"):
            body.append(lines[i])
            i += 1
        out.append((header, body))
    return out


def test_pin_records_commit_date_and_openvino_pairing():
    assert re.fullmatch(r"[0-9a-f]{40}", PIN.commit)
    assert PIN.commit.startswith("150e2025aa")
    assert PIN.date == "2024-12-17"
    assert re.fullmatch(r"\d{4}\.\d+\.\d+", PIN.openvino_release)
    assert re.fullmatch(r"[0-9a-f]{40}", PIN.openvino_commit)
    assert sorted(p.name for p in PATCHES.glob("*.patch")) == [p.name for p in PIN.patches]


@pytest.mark.parametrize("number", range(1, len(PIN.patches) + 1), ids=lambda n: f"{n:04}")
def test_patch_is_a_well_formed_mail_with_consistent_hunks(number):
    patch = PIN.patches[number - 1]
    text = patch.read_text()
    assert text.startswith("From 0000000000000000000000000000000000000000 ")
    # Numbered in series order; the subject names the component (core, vpux_driver_compiler).
    subject = rf"^Subject: \[PATCH {number}/{len(PIN.patches)}\] (core|vpux_driver_compiler): "
    assert re.search(subject, text, re.M)
    for path, diff in file_diffs(patch).items():
        assert hunks(diff), path
        for (_, old_len, _, new_len), body in hunks(diff):
            old = sum(1 for line in body if line[:1] in (" ", "-"))
            new = sum(1 for line in body if line[:1] in (" ", "+"))
            assert (old, new) == (old_len, new_len), (path, old_len, new_len)
            assert not any(line.endswith((" ", "\t")) for line in body if line[:1] == "+")


def test_series_touches_only_the_intended_files():
    touched = {path for patch in PIN.patches for path in file_diffs(patch)}
    assert touched == set(PIN.added) | set(PIN.modified)
    for patch in PIN.patches:
        for path, diff in file_diffs(patch).items():
            assert ("new file mode" in diff) == (path in PIN.added), path
            assert "deleted file mode" not in diff


@pytest.mark.parametrize("upstream_path", sorted(PIN.added))
def test_added_files_are_byte_identical_to_the_tested_ones(upstream_path):
    project_file = ROOT / PIN.added[upstream_path]
    (diff,) = [d for p in PIN.patches for path, d in file_diffs(p).items() if path == upstream_path]
    ((_, body),) = hunks(diff)
    assert all(line.startswith("+") for line in body)
    assert "\\ No newline at end of file" not in diff
    content = "".join(line[1:] + "\n" for line in body)
    assert content.encode() == project_file.read_bytes()


def test_compiler_side_invalidates_at_every_mutation_point():
    """The wiring patch calls the same hooks at the same places as the tested stand-in."""
    (wiring,) = [
        d
        for p in PIN.patches
        for path, d in file_diffs(p).items()
        if path.endswith(".cpp") and "async_deps_info" in path
    ]
    added = "\n".join(line for line in wiring.splitlines() if line.startswith("+"))
    for hook in (
        "onDepsMapResized",
        "onConsumerMapResized",
        "onDepInserted",
        "onConsumerInserted",
        "onDepsMapRewritten",
        "onConsumerMapRewritten",
    ):
        assert f"_sortedDeps.{hook}(" in added, hook
    assert "_sortedDeps.deps(opIdx, _depsMap[opIdx])" in added
    assert "_sortedDeps.consumers(opIdx, _consumerMap[opIdx])" in added
    assert "llvm::sort" not in added


# --- the check command, on git checkouts made from the series' own pre-images ---------------


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def commit_all(repo: Path) -> str:
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "fixture")
    return git(repo, "rev-parse", "HEAD")


def preimage(path: str) -> str:
    """A file holding each hunk's pre-image (context and removed lines), spaced apart."""
    parts = []
    for patch in PIN.patches:
        for p, diff in file_diffs(patch).items():
            if p == path:
                for _, body in hunks(diff):
                    parts.append("".join(line[1:] + "\n" for line in body if line[:1] in " -"))
    return "\n// --- filler ---\n\n".join(parts)


@pytest.fixture
def checkout(tmp_path) -> Path:
    repo = tmp_path / "npu_compiler"
    repo.mkdir()
    git(repo, "init", "-q")
    for path in PIN.modified:
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(preimage(path))
    commit_all(repo)
    return repo


def pin_at(repo: Path) -> patches_check.Pin:
    from dataclasses import replace

    return replace(PIN, commit=git(repo, "rev-parse", "HEAD"))


def test_check_passes_at_the_pin_and_prints_next_steps(checkout):
    pin = pin_at(checkout)
    result = patches_check.check_checkout(checkout, pin)
    assert result.at_pin and result.applies and not result.already_applied and result.ok
    text = "\n".join(patches_check.report(result, checkout, pin))
    assert "applies cleanly" in text
    assert " am " in text and "upstream's own guide" in text
    assert "cmake" not in text.lower()


def test_check_reports_a_different_commit(checkout):
    result = patches_check.check_checkout(checkout, PIN)
    assert not result.at_pin and not result.based_on_pin
    assert "NOT the pinned commit" in "\n".join(patches_check.report(result, checkout, PIN))


def test_check_recognises_the_series_already_applied(checkout):
    pin = pin_at(checkout)
    git(checkout, "apply", *[str(p) for p in PIN.patches])
    commit_all(checkout)
    result = patches_check.check_checkout(checkout, pin)
    assert result.already_applied and result.based_on_pin and result.ok
    assert result.upstream_cache is None


def test_check_recognises_a_tree_that_already_caches(checkout):
    header = checkout / patches_check.ASYNC_DEPS_HEADER
    header.write_text(
        header.read_text().replace(
            "    size_t _execOpCount = 0;",
            "    mutable DepsVecCache _depsVecCache;\n    size_t _execOpCount = 0;",
        )
    )
    commit_all(checkout)
    result = patches_check.check_checkout(checkout, pin_at(checkout))
    assert result.upstream_cache and "_depsVecCache" in result.upstream_cache
    assert not result.ok
    text = "\n".join(patches_check.report(result, checkout, PIN))
    assert "already caches sorted dependency vectors" in text


def test_check_reports_a_series_that_does_not_apply(checkout):
    source = checkout / patches_check.ASYNC_DEPS_SOURCE
    source.write_text(source.read_text().replace("_depsMap[toInd].insert(fromInd);", "changed();"))
    commit_all(checkout)
    result = patches_check.check_checkout(checkout, pin_at(checkout))
    assert not result.applies and not result.ok
    assert "async_deps_info.cpp" in result.apply_error


def series_pinned_at(tmp_path: Path, commit: str) -> Path:
    """A copy of the series whose pin.toml names `commit` (for exit codes through the CLI)."""
    patches = tmp_path / "series"
    shutil.copytree(PATCHES, patches)
    pin_toml = patches / "pin.toml"
    pin_toml.write_text(pin_toml.read_text().replace(PIN.commit, commit))
    return patches


def check_cli(checkout: Path, patches: Path, capsys) -> tuple[int, str]:
    code = main(["patches", "check", "--patches", str(patches), "--npu-compiler", str(checkout)])
    return code, capsys.readouterr().out


def test_descendant_of_the_pin_with_the_series_files_unchanged_is_ready(checkout, tmp_path, capsys):
    patches = series_pinned_at(tmp_path, git(checkout, "rev-parse", "HEAD"))
    (checkout / "NOTES.md").write_text("an unrelated later commit\n")
    commit_all(checkout)
    code, out = check_cli(checkout, patches, capsys)
    assert "commit: descends from the pin" in out
    assert "applies cleanly" in out and "result: ready" in out and " am " in out
    assert code == 0


def test_descendant_of_the_pin_that_changed_a_series_file_says_why_it_fails(
    checkout, tmp_path, capsys
):
    patches = series_pinned_at(tmp_path, git(checkout, "rev-parse", "HEAD"))
    source = checkout / patches_check.ASYNC_DEPS_SOURCE
    # A change outside every hunk: the series still applies textually.
    source.write_text(source.read_text() + "\nvoid laterUpstreamMutation();\n")
    commit_all(checkout)
    code, out = check_cli(checkout, patches, capsys)
    assert code == 1
    assert "applies cleanly" in out
    reason = next(line for line in out.splitlines() if line.startswith("result:"))
    assert "NOT ready" in reason and patches_check.ASYNC_DEPS_SOURCE in reason
    assert "review: git -C" in out


def test_partly_applied_series_names_what_is_applied_and_what_remains(checkout, tmp_path, capsys):
    patches = series_pinned_at(tmp_path, git(checkout, "rev-parse", "HEAD"))
    first, *rest = PIN.patches
    git(checkout, "apply", str(first))
    commit_all(checkout)
    code, out = check_cli(checkout, patches, capsys)
    assert code == 1
    assert "commit: descends from the pin" in out
    still = ", ".join(p.name[:4] for p in rest)
    assert f"series: {first.name[:4]} already applied; {still} still to apply and apply" in out
    assert "result: NOT ready: the series is partly applied" in out
    assert "does NOT apply" not in out and "already exists" not in out
    assert "Check out the pinned commit" not in out
    (apply_line,) = [line for line in out.splitlines() if " am " in line]
    assert first.name not in apply_line and all(p.name in apply_line for p in rest)
    # Applying what it names completes the series.
    git(checkout, "apply", *[str(p) for p in rest])
    commit_all(checkout)
    code, out = check_cli(checkout, patches, capsys)
    assert code == 0
    assert f"series: already applied ({len(PIN.patches)} patches)" in out


def test_check_rejects_paths_that_are_not_npu_compiler_checkouts(tmp_path):
    with pytest.raises(CompileAheadError, match="does not exist"):
        patches_check.check_checkout(tmp_path / "missing", PIN)
    with pytest.raises(CompileAheadError, match="not a git checkout"):
        patches_check.check_checkout(tmp_path, PIN)
    git(tmp_path, "init", "-q")
    with pytest.raises(CompileAheadError, match="not an npu_compiler checkout"):
        patches_check.check_checkout(tmp_path, PIN)


def test_cli_exit_codes(checkout, tmp_path, capsys):
    args = ["patches", "check", "--patches", str(PATCHES), "--npu-compiler"]
    assert main([*args, str(checkout)]) == 1  # not the pinned commit: applies, but flagged
    out = capsys.readouterr().out
    assert "applies cleanly" in out
    assert "result: NOT ready: HEAD is neither the pinned commit nor a descendant" in out
    assert main([*args, str(tmp_path / "nowhere")]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: t.replace('commit = "150e', "commit = 150e", 1), "pin.toml: not valid TOML"),
        (lambda t: t[: t.index("[openvino]")], "pin.toml: openvino.release is missing"),
        (lambda t: t.replace("[series.modified]", "[series.unused]"), "series.modified.files"),
        (lambda t: re.sub(r"patches = \[[^]]*\]", "patches = 3", t), "patches must be a list"),
        (lambda t: t.replace('tag = "npu', "tag = 7 #", 1), "npu_compiler.tag must be a str"),
    ],
    ids=["not-toml", "no-openvino", "no-modified", "patches-not-list", "tag-not-string"],
)
def test_corrupt_pin_is_one_line_error(tmp_path, capsys, edit, message):
    patches = tmp_path / "series"
    shutil.copytree(PATCHES, patches)
    (patches / "pin.toml").write_text(edit((PATCHES / "pin.toml").read_text()))
    code = main(["patches", "check", "--patches", str(patches), "--npu-compiler", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert str(patches / "pin.toml") in err and message in err


@pytest.mark.skipif(not MIRROR.is_dir(), reason="no npu_compiler snapshot on this machine")
def test_series_applies_to_the_real_pinned_files(tmp_path):
    """On the real upstream files at the pin (read from a local snapshot, never committed)."""
    repo = tmp_path / "real"
    repo.mkdir()
    git(repo, "init", "-q")
    archive = subprocess.run(
        ["git", "-C", str(MIRROR), "archive", PIN.commit, *PIN.modified],
        capture_output=True,
        check=True,
    )
    subprocess.run(["tar", "-x", "-C", str(repo)], input=archive.stdout, check=True)
    commit_all(repo)
    result = patches_check.check_checkout(repo, pin_at(repo))
    assert result.applies and result.upstream_cache is None, result.apply_error
    shutil.rmtree(repo)
