//
// Copyright (C) 2026 compile-ahead authors
// SPDX-License-Identifier: Apache-2.0
//
// The extern "C" counter getters of SortedDepsCache. A library that uses the cache compiles this
// file once; tools find the functions in a running process with dlsym.
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
