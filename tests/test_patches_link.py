"""The depsort counters survive the way the patched compiler is really linked.

libnpu_driver_compiler.so (and the npu_mlir_compiler module) reach AsyncDepsInfo through static
libraries and are linked with OpenVINO's shared-library flags: hidden visibility,
``-Wl,--gc-sections -Wl,--exclude-libs,ALL``. This stand-in has the same shape, built from the
files the series adds (byte-identical to ext/depsort/):

* ``libcore.a``: an AsyncDepsInfo stand-in that queries a SortedDepsCache (npu_compiler_core);
* ``libcompiler_static.a``: a compile entry calling it, plus the getters' own object, as the
  module's sources give npu_mlir_compiler_static one (npu_mlir_compiler_static);
* the shared library: a driver entry point calling the compiler (vcl_compiler.cpp).

"series" is patches/npu_compiler: the shared library compiles sorted_deps_cache_c_api.cpp as
one of its own sources (0003). "archive only" has the getters in the core library alone,
referenced by nothing. The library is loaded RTLD_LOCAL in a child process, as the NPU plugin
and driver load their compiler, exercised, and read with depsort.read_loaded_counters().
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from compile_ahead.profiling.npu_patches import depsort

ROOT = Path(__file__).resolve().parents[1]
DEPSORT_DIR = ROOT / "ext" / "depsort"
C_API = DEPSORT_DIR / "sorted_deps_cache_c_api.cpp"
PATCHES = ROOT / "patches" / "npu_compiler"

# cmake/developer_package/compile_flags/os_flags.cmake (OpenVINO): hidden visibility presets,
# function and data sections; shared libraries and modules link with these two flags.
COMPILE_FLAGS = [
    "-std=c++17",
    "-O2",
    "-fPIC",
    "-fvisibility=hidden",
    "-fvisibility-inlines-hidden",
    "-ffunction-sections",
    "-fdata-sections",
]
SHARED_LINK_FLAGS = ["-shared", "-Wl,--gc-sections", "-Wl,--exclude-libs,ALL"]

# AsyncDepsInfo stand-in: a fixed query pattern over three ops (deps {}, {0}, {0, 1}).
CORE = r"""
#include "sorted_deps_cache.hpp"

#include <unordered_set>
#include <vector>

int standin_deps_info_run(int rounds) {
    compile_ahead::depsort::SortedDepsCache<std::vector<size_t>> cache;
    std::vector<std::unordered_set<size_t>> deps = {{}, {0}, {0, 1}};
    cache.onDepsMapResized(deps.size());
    int checksum = 0;
    for (int round = 0; round < rounds; ++round) {
        for (size_t op = 0; op < deps.size(); ++op) {
            for (size_t dep : cache.deps(op, deps[op])) {
                checksum += static_cast<int>(dep);
            }
        }
    }
    return checksum;
}
"""
COMPILER = r"""
int standin_deps_info_run(int rounds);
int standin_compiler_compile(int rounds) { return standin_deps_info_run(rounds); }
"""
DRIVER = r"""
int standin_compiler_compile(int rounds);
extern "C" __attribute__((visibility("default"))) int standin_vcl_compile(int rounds) {
    return standin_compiler_compile(rounds);
}
"""

ROUNDS = 5
QUERIES = 3 * ROUNDS  # three ops per round; the first round misses, every later one hits


def compiler() -> str:
    found = shutil.which("g++") or shutil.which("c++")
    assert found, "a C++ compiler is needed (the package's own extensions need one too)"
    return found


def run(*args: str | Path, cwd: Path) -> None:
    done = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True)
    assert done.returncode == 0, f"{' '.join(map(str, args))}\n{done.stderr}"


@pytest.fixture(scope="module")
def objects(tmp_path_factory) -> Path:
    """Every object file, compiled once with OpenVINO's flags."""
    out = tmp_path_factory.mktemp("depsort-link")
    sources = {"core": CORE, "compiler": COMPILER, "driver": DRIVER}
    for name, text in sources.items():
        (out / f"{name}.cpp").write_text(text)
    sources_and_objects = [(out / f"{name}.cpp", f"{name}.o") for name in sources]
    sources_and_objects.append((C_API, "c_api.o"))
    for source, obj in sources_and_objects:
        run(compiler(), *COMPILE_FLAGS, f"-I{DEPSORT_DIR}", "-c", source, "-o", obj, cwd=out)
    return out


def linkers() -> list:
    params = [pytest.param("bfd", id="ld.bfd")]
    # OpenVINO's cmake can move GCC builds to gold (ov_try_use_gold_linker); clang may use lld.
    for name in ("gold", "lld"):
        mark = pytest.mark.skipif(shutil.which(f"ld.{name}") is None, reason=f"no ld.{name}")
        params.append(pytest.param(name, id=f"ld.{name}", marks=mark))
    return params


def link(objects: Path, layout: str, linker: str) -> Path:
    """The driver library with the getters where `layout` puts them."""
    out = objects / f"{layout}-{linker}"
    out.mkdir(exist_ok=True)
    if layout == "series":
        core, compiler_static, own = ["core.o"], ["compiler.o", "c_api.o"], ["c_api.o"]
    else:  # archive only: the getters in the core library, referenced by nothing
        core, compiler_static, own = ["core.o", "c_api.o"], ["compiler.o"], []
    run("ar", "rcs", out / "libcore.a", *core, cwd=objects)
    run("ar", "rcs", out / "libcompiler_static.a", *compiler_static, cwd=objects)
    library = out / "libnpu_driver_compiler_standin.so"
    run(
        compiler(),
        f"-fuse-ld={linker}",
        *SHARED_LINK_FLAGS,
        "driver.o",
        *own,
        out / "libcompiler_static.a",
        out / "libcore.a",
        "-o",
        library,
        cwd=objects,
    )
    return library


def load_and_read(library: Path, env: dict[str, str] | None = None) -> dict:
    """In a child process (a loaded library stays loaded): dlopen RTLD_LOCAL, reset, compile,
    read the counters the way the tools do."""
    code = f"""
        import ctypes, json, os
        import {depsort.__name__} as depsort
        lib = ctypes.CDLL({str(library)!r}, mode=os.RTLD_LOCAL)
        exported = [hasattr(lib, s) for s in (depsort.COUNTERS_SYMBOL, depsort.RESET_SYMBOL)]
        reset = depsort.reset_loaded_counters()
        checksum = lib.standin_vcl_compile({ROUNDS})
        counters = depsort.read_loaded_counters()
        print(json.dumps({{
            "exported": exported,
            "reset": reset,
            "checksum": checksum,
            "counters": None if counters is None else counters.__dict__,
        }}))
    """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("linker", linkers())
def test_series_layout_exports_counters_read_from_python(objects, linker):
    library = link(objects, "series", linker)
    got = load_and_read(library)
    assert got["exported"] == [True, True]
    assert got["reset"] is True
    assert got["checksum"] == ROUNDS * (0 + 0 + 1)
    counters = got["counters"]
    assert Path(counters["library"]).resolve() == library.resolve()
    # The getters read the same counters the archived AsyncDepsInfo code counts into.
    assert (counters["requests"], counters["misses"]) == (QUERIES, 3)
    assert counters["hits"] == QUERIES - 3
    assert counters["elements_sorted"] == 0 + 1 + 2


@pytest.mark.parametrize("linker", linkers())
def test_getters_only_in_a_static_library_export_nothing(objects, linker):
    library = link(objects, "archive-only", linker)
    got = load_and_read(library)
    assert got["checksum"] == ROUNDS * (0 + 0 + 1)  # the library works; only the counters are lost
    assert got["exported"] == [False, False]
    assert got["reset"] is False
    assert got["counters"] is None


def test_series_layout_counts_every_request_as_a_miss_when_off(objects):
    library = link(objects, "series", "bfd")
    counters = load_and_read(library, env={"COMPILE_AHEAD_DEPSORT": "off"})["counters"]
    assert (counters["requests"], counters["hits"], counters["misses"]) == (QUERIES, 0, QUERIES)


def test_the_driver_library_target_compiles_the_getters_itself():
    """What the stand-in's "series" layout assumes of the real build files."""
    from compile_ahead.profiling.npu_patches import check as patches_check

    pin = patches_check.Pin.load(PATCHES)
    (c_api,) = [path for path, ours in pin.added.items() if ours.endswith(C_API.name)]
    # The module (npu_mlir_compiler) compiles src/vpux_compiler/src/*.cpp as its own objects;
    # subdirectories such as src/core/ become static libraries.
    assert Path(c_api).parent == Path("src/vpux_compiler/src")
    cmake = "src/vpux_driver_compiler/src/vpux_compiler_l0/CMakeLists.txt"
    assert cmake in pin.modified
    text = "\n".join(p.read_text() for p in pin.patches)
    diff = text[text.index(f"diff --git a/{cmake}") :]
    added = "\n".join(line[1:] for line in diff.splitlines() if line.startswith("+"))
    assert "target_sources(${TARGET_NAME}" in added
    assert f"${{InferenceEngineVPUXPlugin_SOURCE_DIR}}/{c_api}" in added
    # Right after the source list of add_library(npu_driver_compiler SHARED ...).
    assert "\n         vcl_query_network.cpp\n )\n \n+" in diff


def test_a_getter_writing_another_stats_layout_is_refused(tmp_path):
    source = tmp_path / "other_layout.cpp"
    source.write_text(
        r"""
        #include "sorted_deps_cache.hpp"
        extern "C" void compile_ahead_depsort_counters(compile_ahead_depsort_stats* out) {
            std::memset(out, 0, sizeof(*out));
            out->version = 2;
            out->struct_size = sizeof(*out);
        }
        """
    )
    library = tmp_path / "libother_layout.so"
    run(
        compiler(),
        *COMPILE_FLAGS,
        f"-I{DEPSORT_DIR}",
        *SHARED_LINK_FLAGS,
        source,
        "-o",
        library,
        cwd=tmp_path,
    )
    code = f"""
        import ctypes, os
        import {depsort.__name__} as depsort
        from compile_ahead.errors import CompileAheadError
        ctypes.CDLL({str(library)!r}, mode=os.RTLD_LOCAL)
        try:
            depsort.read_loaded_counters()
        except CompileAheadError as err:
            print(err)
    """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "stats layout version 2" in done.stdout and str(library) in done.stdout
