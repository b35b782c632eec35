// A stand-in for a patched compiler library in tests: it exports the counter getters (compiled
// from the same sorted_deps_cache_c_api.cpp the patch adds) and runs a fixed query pattern.
#include "sorted_deps_cache.hpp"

#include <unordered_set>
#include <vector>

extern "C" __attribute__((visibility("default"))) int compile_ahead_depsort_probe_run(int rounds) {
    compile_ahead::depsort::SortedDepsCache<std::vector<size_t>> cache(compile_ahead::depsort::Mode::Cached);
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
