// Finds the counter getters of a patched NPU compiler loaded anywhere in this process.
#pragma once

#include "sorted_deps_cache.hpp"

#include <optional>
#include <string>

namespace compile_ahead::depsort {

struct LoadedCounters {
    std::string library;  // path of the shared object that exports the getters
    compile_ahead_depsort_stats stats;
};

// Looks in the global scope first (RTLD_DEFAULT), then in every loaded shared object, since the
// NPU plugin loads its compiler RTLD_LOCAL. Empty when no loaded object exports the getters.
std::optional<LoadedCounters> readLoadedCounters();

// Resets the counters of the first loaded object found; false when there is none.
bool resetLoadedCounters();

}  // namespace compile_ahead::depsort
