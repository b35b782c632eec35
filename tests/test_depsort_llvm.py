"""The cache header with the compiler's own containers (llvm::SmallVector, llvm::DenseSet).

Compiles a small program against the LLVM headers of this machine, warnings as errors, and
checks the cache against sorting a DenseSet every time. Needs g++ and LLVM development files.
"""

from __future__ import annotations

import glob
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEADER_DIR = ROOT / "ext" / "depsort"

PROGRAM = r"""
#include "sorted_deps_cache.hpp"

#include <llvm/ADT/DenseSet.h>
#include <llvm/ADT/STLExtras.h>
#include <llvm/ADT/SmallVector.h>

#include <cstdio>
#include <random>

using Vec = llvm::SmallVector<size_t>;

int main() {
    compile_ahead::depsort::SortedDepsCache<Vec> cache(compile_ahead::depsort::Mode::Cached);
    llvm::SmallVector<llvm::DenseSet<size_t>> deps(64);
    cache.onDepsMapResized(deps.size());
    std::mt19937 rng(7);
    compile_ahead_depsort_reset();
    for (int step = 0; step < 20000; ++step) {
        const size_t op = rng() % deps.size();
        if (rng() % 8 == 0) {
            if (deps[op].insert(rng() % 1000).second) {
                cache.onDepInserted(op);
            }
            continue;
        }
        const Vec got = cache.deps(op, deps[op]);  // a copy, as getOpDeps() returns
        Vec want(deps[op].begin(), deps[op].end());
        llvm::sort(want);
        if (got != want) {
            std::printf("MISMATCH at op %zu\n", op);
            return 1;
        }
    }
    compile_ahead_depsort_stats stats{};
    compile_ahead_depsort_counters(&stats);
    std::printf("%llu %llu %llu\n", (unsigned long long)stats.requests,
                (unsigned long long)stats.hits, (unsigned long long)stats.misses);
    return stats.hits + stats.misses == stats.requests && stats.hits > 0 ? 0 : 1;
}
"""


def llvm_include_dirs() -> list[str]:
    found = sorted(glob.glob("/usr/include/llvm-[0-9]*/llvm/ADT/DenseSet.h"))
    if not found:
        return []
    version = Path(found[-1]).parents[2].name.removeprefix("llvm-")
    dirs = [str(Path(found[-1]).parents[2])]
    c_dir = Path(f"/usr/include/llvm-c-{version}")
    if c_dir.is_dir():
        dirs.append(str(c_dir))
    return dirs


def llvm_library() -> Path | None:
    libs = sorted(glob.glob("/usr/lib/llvm-[0-9]*/lib/libLLVM-[0-9]*.so"))
    return Path(libs[-1]) if libs else None


@pytest.mark.skipif(
    shutil.which("g++") is None or not llvm_include_dirs() or llvm_library() is None,
    reason="needs g++ and LLVM development headers/library (e.g. Debian llvm-14-dev)",
)
def test_header_compiles_and_matches_llvm_sort_with_compiler_containers(tmp_path):
    source = tmp_path / "llvm_check.cpp"
    source.write_text(PROGRAM)
    binary = tmp_path / "llvm_check"
    lib = llvm_library()
    command = [
        "g++",
        "-std=c++17",
        "-O1",
        "-Wall",
        "-Wextra",
        "-Wpedantic",
        "-Wshadow",
        "-Werror",
        f"-I{HEADER_DIR}",
        *[f"-isystem{d}" for d in llvm_include_dirs()],
        str(source),
        str(HEADER_DIR / "sorted_deps_cache_c_api.cpp"),
        "-o",
        str(binary),
        str(lib),
        f"-Wl,-rpath,{lib.parent}",
    ]
    built = subprocess.run(command, capture_output=True, text=True, timeout=240)
    assert built.returncode == 0, built.stderr
    ran = subprocess.run([str(binary)], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    requests, hits, misses = map(int, ran.stdout.split())
    assert requests == hits + misses and hits > misses > 0
