"""OpenVINO errors reach the user as one line that keeps the reason, not only the location or
the text before "Error:"."""

from __future__ import annotations

import pytest

from compile_ahead.commands.main import main
from compile_ahead.runtime.base.ov_core import openvino_error_summary

LIB = "/venv/lib/python3.11/site-packages/openvino/../openvino/libs"

# Texts as OpenVINO 2026.4 raises them (RuntimeError), captured on a machine without the NPU
# compiler and with an address-space limit that made allocations fail.
NPU_COMPILER_MISSING = (
    "Exception from src/inference/src/cpp/core.cpp:117:\n"
    "Exception from src/inference/src/dev/plugin.cpp:54:\n"
    "Exception from src/plugins/intel_npu/src/compiler_adapter/src/plugin_compiler_adapter.cpp"
    ":54:\n"
    "VCL compiler loading failed, aborting. Error: Exception from "
    "src/plugins/intel_npu/src/utils/src/vcl/vcl_api.cpp:22:\n"
    f'Cannot load library "{LIB}/libopenvino_intel_npu_compiler_loader.so": '
    f"{LIB}/libopenvino_intel_npu_compiler_loader.so: cannot open shared object file: "
    "No such file or directory\n\n\n\n"
)
CPU_ALLOCATION_FAILED = (
    "Exception from src/inference/src/cpp/core.cpp:117:\n"
    "Exception from src/inference/src/dev/plugin.cpp:54:\n"
    "Check 'ptr' failed at src/plugins/intel_cpu/src/cpu_memory.cpp:257:\n"
    "Failed to allocate 4294967296 bytes of memory\n\n\n"
)
BAD_ALLOC = (
    "Exception from src/inference/src/cpp/core.cpp:117:\n"
    "Exception from src/inference/src/dev/plugin.cpp:54:\n"
    "Exception from src/core/src/runtime/allocator.cpp:79:\n"
    "std::bad_alloc\n\n\n"
)
GPU_PLUGIN_MISSING = (
    "Exception from src/inference/src/cpp/core.cpp:117:\n"
    f'Cannot load library "{LIB}/libopenvino_intel_gpu_plugin.so": libOpenCL.so.1: '
    "cannot open shared object file: No such file or directory\n"
)


@pytest.mark.parametrize(
    ("text", "summary"),
    [
        (
            NPU_COMPILER_MISSING,
            "VCL compiler loading failed, aborting. Error: Cannot load library "
            f'"{LIB}/libopenvino_intel_npu_compiler_loader.so": cannot open shared object '
            "file: No such file or directory",
        ),
        (CPU_ALLOCATION_FAILED, "Failed to allocate 4294967296 bytes of memory"),
        (BAD_ALLOC, "out of memory (std::bad_alloc)"),
        (
            GPU_PLUGIN_MISSING,
            f'Cannot load library "{LIB}/libopenvino_intel_gpu_plugin.so": libOpenCL.so.1: '
            "cannot open shared object file: No such file or directory",
        ),
        ("plain message", "plain message"),
    ],
    ids=["npu-compiler-missing", "cpu-allocation", "bad-alloc", "gpu-plugin", "plain"],
)
def test_summary_keeps_the_reason(text: str, summary: str) -> None:
    assert openvino_error_summary(RuntimeError(text)) == summary


def test_summary_of_a_long_error_keeps_head_and_reason() -> None:
    text = "Exception from a.cpp:1:\nWhile validating node 'x':\n" + "detail " * 200 + "\nREASON"
    summary = openvino_error_summary(RuntimeError(text))
    assert summary.startswith("While validating node 'x'") and summary.endswith("REASON")
    assert "\n" not in summary and len(summary) < 700


def test_npu_compile_failure_names_its_reason(capsys) -> None:
    """The real error of this machine's OpenVINO for NPU (no NPU compiler in the wheel), given
    up front (tests/test_device_refusal.py checks every command)."""
    import numpy as np
    import openvino as ov

    param = ov.opset13.parameter([1, 4], np.float32)
    model = ov.Model([ov.opset13.relu(param)], [param])
    try:
        ov.Core().compile_model(model, "NPU")
    except RuntimeError as err:
        raw = str(err)
    else:
        pytest.skip(reason="this machine compiles for NPU")
    reason = raw.strip().splitlines()[-1].rsplit(": ", 1)[-1]
    code = main(["generate", "--model", "tiny", "--prompt-ids", "1,2", "--max-new-tokens", "1",
                 "--device", "NPU"])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()[-1]  # the error is the last line
    assert code == 2 and err.startswith("compile-ahead: error: ")
    assert "OpenVINO cannot compile for NPU here: " in err and reason in err
    assert "Exception from" not in err
