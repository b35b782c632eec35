"""Compile properties a decode graph gets by default (device_defaults.MEASURED_DECODE_PROPERTIES):
on the CPU the snippets code generator is off for decode graphs and on for prefill graphs, as
the plugin's own runtime model shows; the user's property wins; a release that refuses the
property compiles with its default."""

from __future__ import annotations

import collections

import pytest

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.compile.graph.step_compile import compile_step
from compile_ahead.runtime.compile.rung_builder import RungBuilder
from compile_ahead.runtime.compile.settings import options as options_module
from compile_ahead.runtime.compile.settings.device_defaults import decode_properties
from compile_ahead.runtime.compile.settings.modes import GraphMode, PlacementKind
from compile_ahead.runtime.compile.settings.options import CompileOptions
from compile_ahead.runtime.compile.settings.properties import checked_properties
from compile_ahead.runtime.compile.worker.client import CompileWorker
from compile_ahead.runtime.graphs.spec import GraphSpec
from compile_ahead.runtime.sources.resolve import resolve_model

# The CPU plugin's runtime-model layer type of a generated (snippets) kernel.
GENERATED = "Subgraph"


def _layer_types(step) -> collections.Counter:
    ops = step.compiled.get_runtime_model().get_ordered_ops()
    return collections.Counter(op.get_rt_info()["layerType"].astype(str) for op in ops)


@pytest.fixture(scope="module")
def tiny():
    return resolve_model("tiny")


def test_cpu_decode_graphs_compile_without_generated_kernels_prefill_graphs_keep_them(tiny):
    options = CompileOptions().resolved()
    kv = options.kv_precision
    decode = compile_step(tiny, GraphSpec(64, 1, kv), options).step
    prefill = compile_step(tiny, GraphSpec(64, 16, kv), options).step
    assert _layer_types(decode)[GENERATED] == 0
    assert _layer_types(decode)["Eltwise"] > 0  # the element-wise ops are still there
    assert _layer_types(prefill)[GENERATED] > 0


def test_the_users_property_wins(tiny):
    options = CompileOptions(extra_config={"SNIPPETS_MODE": "ENABLE"}).resolved()
    assert options.for_graph("decode").extra_config == {"SNIPPETS_MODE": "ENABLE"}
    decode = compile_step(tiny, GraphSpec(64, 1, options.kv_precision), options).step
    assert _layer_types(decode)[GENERATED] > 0


def test_only_decode_graphs_and_only_measured_devices_get_them():
    cpu = CompileOptions().resolved()
    assert cpu.for_graph("decode").extra_config == decode_properties("CPU")
    assert cpu.for_graph("prefill").extra_config == {}
    assert decode_properties("NPU") == {}
    npu = CompileOptions(device="NPU", inference_precision="f16")
    assert npu.for_graph("decode") is npu  # nothing probed on a device without defaults


def test_a_release_that_refuses_the_property_compiles_with_its_default(monkeypatch):
    monkeypatch.setattr(options_module, "device_refusal", lambda *a: "Unsupported property")
    options = CompileOptions().resolved()
    assert options.for_graph("decode").extra_config == {}


def test_the_property_is_settable_by_the_user_and_a_wrong_value_is_the_plugins_reason():
    assert checked_properties("CPU", {"SNIPPETS_MODE": "ENABLE"}, "--ov-config") == {
        "SNIPPETS_MODE": "ENABLE"
    }
    with pytest.raises(CompileAheadError) as err:
        checked_properties("CPU", {"SNIPPETS_MODE": "SOMETIMES"}, "--ov-config")
    assert "SNIPPETS_MODE=SOMETIMES" in str(err.value)
    assert "DISABLE" in str(err.value)  # the plugin names the values it takes


def test_run_and_generate_report_the_defaults_beside_the_users_properties(tmp_path, capsys):
    import json

    from compile_ahead.commands.main import main

    run = ["run", "--model", "tiny", "--ladder", "32,64", "--schedule", "b0", "--no-progress"]
    run += ["--prompt-len", "8", "--decode-tokens", "4", "--no-cache"]
    plain, users = tmp_path / "plain.json", tmp_path / "users.json"
    assert main([*run, "--report", str(plain)]) == 0
    assert "decode SNIPPETS_MODE=DISABLE (device default)" in capsys.readouterr().out
    assert json.loads(plain.read_text())["decode_defaults"] == {"SNIPPETS_MODE": "DISABLE"}
    assert main([*run, "--report", str(users), "--ov-config", "SNIPPETS_MODE=ENABLE"]) == 0
    report = json.loads(users.read_text())
    assert report["decode_defaults"] == {}
    assert report["ov_config"] == {"SNIPPETS_MODE": "ENABLE"}
    capsys.readouterr()
    gen = ["generate", "--model", "tiny", "--prompt-ids", "1,2,3", "--max-new-tokens", "2"]
    assert main([*gen, "--no-cache", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["decode_defaults"] == {"SNIPPETS_MODE": "DISABLE"}


def test_a_decode_graph_compiled_by_the_worker_gets_them_too(tiny, monkeypatch):
    """The worker compiles with the options its request carries (an imported graph's runtime
    model shows no generated kernels either way): the builder adds the decode defaults to
    them, as compile_step does in this process."""
    sent = []
    compile_in_worker = CompileWorker.compile

    def spy(self, source_ref, spec, options, **kwargs):
        sent.append(options)
        return compile_in_worker(self, source_ref, spec, options, **kwargs)

    monkeypatch.setattr(CompileWorker, "compile", spy)
    builder = RungBuilder(tiny, CompileOptions().resolved(), placement=PlacementKind.WORKER)
    try:
        kv = builder.options.kv_precision
        builder.build(GraphSpec(64, 1, kv), background=True)
    finally:
        builder.shutdown()
    assert [o.extra_config for o in sent] == [decode_properties("CPU")]


def test_split_graphs_keep_the_plugins_defaults_and_the_report_says_so(tiny, tmp_path):
    import json

    from compile_ahead.commands.main import main

    builder = RungBuilder(tiny, CompileOptions().resolved(), graph=GraphMode.SPLIT)
    assert builder.decode_defaults == {}
    step = builder.build(GraphSpec(64, 1, builder.options.kv_precision)).step
    weight_parts = step.parts.compiled
    kinds = collections.Counter()
    for compiled in [*weight_parts, step.compiled]:
        ops = compiled.get_runtime_model().get_ordered_ops()
        kinds.update(op.get_rt_info()["layerType"].astype(str) for op in ops)
    assert kinds[GENERATED] > 0
    report = tmp_path / "split.json"
    run = ["run", "--model", "tiny", "--ladder", "32,64", "--schedule", "b0", "--no-progress"]
    run += ["--prompt-len", "8", "--decode-tokens", "4", "--no-cache", "--graph", "split"]
    assert main([*run, "--report", str(report)]) == 0
    assert json.loads(report.read_text())["decode_defaults"] == {}
