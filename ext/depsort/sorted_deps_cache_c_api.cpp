//
// Copyright (C) 2026 compile-ahead authors
// SPDX-License-Identifier: Apache-2.0
//
// The extern "C" counter getters of SortedDepsCache; tools find them in a running process with
// dlsym. Compile this file into the shared library itself, as one of its own sources: nothing
// calls these functions, so from a static library the linker would leave them out, and
// -Wl,--exclude-libs,ALL (OpenVINO's shared-library flags) hides what static libraries define.
// Default-visibility symbols of the library's own objects are exported, and --gc-sections keeps
// every exported symbol of a shared library.
//

#if __has_include("vpux/compiler/core/sorted_deps_cache.hpp")
#include "vpux/compiler/core/sorted_deps_cache.hpp"
#else
#include "sorted_deps_cache.hpp"
#endif

extern "C" {

COMPILE_AHEAD_DEPSORT_API void compile_ahead_depsort_counters(struct compile_ahead_depsort_stats* out) {
    if (out != nullptr) {
        compile_ahead::depsort::globalCounters().snapshot(*out);
    }
}

COMPILE_AHEAD_DEPSORT_API void compile_ahead_depsort_reset(void) {
    compile_ahead::depsort::globalCounters().reset();
}
}
