//
// Copyright (C) 2026 compile-ahead authors
// SPDX-License-Identifier: Apache-2.0
//
// Memoized sorted dependency / consumer vectors for vpux::AsyncDepsInfo.
//
// AsyncDepsInfo keeps, per async.execute op index, an unordered set of the ops it depends on
// (deps map) and of the ops that depend on it (consumer map). getOpDeps() / getConsumerOps()
// copy a set into a vector and sort it on every call; the schedulers query the same unchanged
// ops every round. SortedDepsCache keeps the sorted vector per op index and drops it exactly
// where AsyncDepsInfo changes the corresponding set, so results stay identical to sorting every
// time (the order feeds the DMA prefetch order).
//
// Self-contained (standard library only): the same file is added to the compiler by the
// compile-ahead patch series and compiled and tested on its own by the compile-ahead project.
//
// Environment (read once per process):
//   COMPILE_AHEAD_DEPSORT=off       sort on every request (the upstream behaviour), still counted
//   COMPILE_AHEAD_DEPSORT_SHADOW=1  on every hit, sort again and abort on any difference
//
// C API (defined in sorted_deps_cache_c_api.cpp, looked up with dlsym by the compile-ahead tools):
//   void compile_ahead_depsort_counters(struct compile_ahead_depsort_stats* out);
//   void compile_ahead_depsort_reset(void);
//

#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define COMPILE_AHEAD_DEPSORT_STATS_VERSION 1u

#ifndef COMPILE_AHEAD_DEPSORT_API
#if defined(_WIN32)
#define COMPILE_AHEAD_DEPSORT_API __declspec(dllexport)
#else
#define COMPILE_AHEAD_DEPSORT_API __attribute__((visibility("default")))
#endif
#endif

extern "C" {

// Process-wide totals of every SortedDepsCache in the library that defines the C API.
// Layout version 1 is frozen: the getter writes exactly this struct. New fields would come with
// a new struct and a new getter name, never by growing this one.
struct compile_ahead_depsort_stats {
    uint32_t version;          // COMPILE_AHEAD_DEPSORT_STATS_VERSION
    uint32_t struct_size;      // sizeof(struct compile_ahead_depsort_stats) of the writer
    uint64_t requests;         // getOpDeps / getConsumerOps style queries (= hits + misses)
    uint64_t hits;             // answered from the cache
    uint64_t misses;           // answered by copying and sorting the set
    uint64_t elements_sorted;  // elements copied and sorted on misses
    uint64_t sort_ns;          // steady-clock nanoseconds spent copying and sorting on misses
    uint64_t invalidations;    // cached vectors dropped because their set changed
    uint64_t shadow_checks;    // hits re-verified in shadow mode
};

COMPILE_AHEAD_DEPSORT_API void compile_ahead_depsort_counters(struct compile_ahead_depsort_stats* out);
COMPILE_AHEAD_DEPSORT_API void compile_ahead_depsort_reset(void);
}

namespace compile_ahead {
namespace depsort {

enum class Mode {
    Cached,    // memoize; the default
    Shadow,    // memoize, and verify every hit against a fresh sort
    Uncached,  // sort on every request (the behaviour without the patch)
};

// requests is not stored: it is hits + misses, one atomic add per request instead of two, and
// the sum in a snapshot always adds up.
struct Counters {
    std::atomic<uint64_t> hits{0};
    std::atomic<uint64_t> misses{0};
    std::atomic<uint64_t> elementsSorted{0};
    std::atomic<uint64_t> sortNs{0};
    std::atomic<uint64_t> invalidations{0};
    std::atomic<uint64_t> shadowChecks{0};

    void snapshot(compile_ahead_depsort_stats& out) const {
        std::memset(&out, 0, sizeof(out));
        out.version = COMPILE_AHEAD_DEPSORT_STATS_VERSION;
        out.struct_size = static_cast<uint32_t>(sizeof(out));
        out.hits = hits.load(std::memory_order_relaxed);
        out.misses = misses.load(std::memory_order_relaxed);
        out.requests = out.hits + out.misses;
        out.elements_sorted = elementsSorted.load(std::memory_order_relaxed);
        out.sort_ns = sortNs.load(std::memory_order_relaxed);
        out.invalidations = invalidations.load(std::memory_order_relaxed);
        out.shadow_checks = shadowChecks.load(std::memory_order_relaxed);
    }

    void reset() {
        hits.store(0, std::memory_order_relaxed);
        misses.store(0, std::memory_order_relaxed);
        elementsSorted.store(0, std::memory_order_relaxed);
        sortNs.store(0, std::memory_order_relaxed);
        invalidations.store(0, std::memory_order_relaxed);
        shadowChecks.store(0, std::memory_order_relaxed);
    }
};

// Compiler threads may run passes (each with its own AsyncDepsInfo) concurrently: the totals
// are shared, hence atomic. A cache object itself is as thread-safe as the maps it mirrors.
inline Counters& globalCounters() {
    static Counters counters;
    return counters;
}

inline bool envFlagSet(const char* name, const char* value) {
    const char* set = std::getenv(name);
    return set != nullptr && std::strcmp(set, value) == 0;
}

inline Mode modeFromEnvironment() {
    if (envFlagSet("COMPILE_AHEAD_DEPSORT", "off") || envFlagSet("COMPILE_AHEAD_DEPSORT", "0")) {
        return Mode::Uncached;
    }
    if (envFlagSet("COMPILE_AHEAD_DEPSORT_SHADOW", "1")) {
        return Mode::Shadow;
    }
    return Mode::Cached;
}

inline Mode processMode() {
    static const Mode mode = modeFromEnvironment();
    return mode;
}

// The reference: what AsyncDepsInfo computes without the cache.
template <class Vec, class Set>
Vec sortedCopy(const Set& set) {
    Vec vec(set.begin(), set.end());
    std::sort(vec.begin(), vec.end());
    return vec;
}

// One sorted vector per op index for one map (deps or consumers).
template <class Vec>
class SortedVecCache {
public:
    explicit SortedVecCache(Mode mode, const char* what): _mode(mode), _what(what) {
    }

    size_t size() const {
        return _entries.size();
    }

    bool isCached(size_t idx) const {
        return idx < _entries.size() && _entries[idx].valid;
    }

    // The map was resized: entries past its old end start empty and uncached.
    void resize(size_t newSize) {
        if (newSize < _entries.size()) {
            invalidateAll();
        }
        _entries.resize(newSize);
    }

    void invalidate(size_t idx) {
        if (idx < _entries.size() && _entries[idx].valid) {
            _entries[idx].valid = false;
            globalCounters().invalidations.fetch_add(1, std::memory_order_relaxed);
        }
    }

    void invalidateAll() {
        uint64_t dropped = 0;
        for (auto& entry : _entries) {
            dropped += entry.valid ? 1 : 0;
            entry.valid = false;
        }
        globalCounters().invalidations.fetch_add(dropped, std::memory_order_relaxed);
    }

    template <class Set>
    const Vec& get(size_t idx, const Set& set) {
        Counters& counters = globalCounters();
        if (idx >= _entries.size()) {
            _entries.resize(idx + 1);
        }
        Entry& entry = _entries[idx];
        if (entry.valid) {
            counters.hits.fetch_add(1, std::memory_order_relaxed);
            if (_mode == Mode::Shadow) {
                verify(idx, entry.sorted, set);
            }
            return entry.sorted;
        }
        counters.misses.fetch_add(1, std::memory_order_relaxed);
        const auto start = std::chrono::steady_clock::now();
        entry.sorted = sortedCopy<Vec>(set);
        const auto stop = std::chrono::steady_clock::now();
        counters.elementsSorted.fetch_add(entry.sorted.size(), std::memory_order_relaxed);
        counters.sortNs.fetch_add(
                static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(stop - start).count()),
                std::memory_order_relaxed);
        entry.valid = _mode != Mode::Uncached;
        return entry.sorted;
    }

private:
    struct Entry {
        Vec sorted;
        bool valid = false;
    };

    template <class Set>
    void verify(size_t idx, const Vec& cached, const Set& set) const {
        globalCounters().shadowChecks.fetch_add(1, std::memory_order_relaxed);
        const Vec fresh = sortedCopy<Vec>(set);
        if (fresh.size() == cached.size() && std::equal(fresh.begin(), fresh.end(), cached.begin())) {
            return;
        }
        std::fprintf(stderr,
                     "compile-ahead depsort shadow check FAILED: cached sorted %s vector of op %zu "
                     "(%zu elements) differs from a fresh sort of its set (%zu elements); a mutation "
                     "point does not invalidate the cache. Aborting (COMPILE_AHEAD_DEPSORT_SHADOW=1).\n",
                     _what, idx, static_cast<size_t>(cached.size()), static_cast<size_t>(fresh.size()));
        std::fflush(stderr);
        std::abort();
    }

    std::vector<Entry> _entries;
    Mode _mode;
    const char* _what;
};

// The caches of one AsyncDepsInfo. Each on* hook names the place where AsyncDepsInfo changes
// its maps; the owner calls it right after the change.
template <class Vec>
class SortedDepsCache {
public:
    explicit SortedDepsCache(Mode mode = processMode()): _deps(mode, "dependency"), _consumers(mode, "consumer") {
    }

    // The deps map was resized (buildDepsMap, preAllocateForNewOps).
    void onDepsMapResized(size_t newSize) {
        _deps.resize(newSize);
    }

    // The consumer map was resized (buildConsMap, preAllocateForNewOps).
    void onConsumerMapResized(size_t newSize) {
        _consumers.resize(newSize);
    }

    // An element was actually inserted into the deps set of `opIdx` (addExecOp, addDependency).
    void onDepInserted(size_t opIdx) {
        _deps.invalidate(opIdx);
    }

    // An element was actually inserted into the consumer set of `opIdx` (addDependency, buildConsMap).
    void onConsumerInserted(size_t opIdx) {
        _consumers.invalidate(opIdx);
    }

    // Any number of deps sets were rewritten (optimizeDepsMap).
    void onDepsMapRewritten() {
        _deps.invalidateAll();
    }

    // The consumer map was cleared or is about to be rebuilt (optimizeDepsMap, buildConsMap).
    void onConsumerMapRewritten() {
        _consumers.invalidateAll();
    }

    template <class Set>
    const Vec& deps(size_t opIdx, const Set& set) {
        return _deps.get(opIdx, set);
    }

    template <class Set>
    const Vec& consumers(size_t opIdx, const Set& set) {
        return _consumers.get(opIdx, set);
    }

    bool depsCached(size_t opIdx) const {
        return _deps.isCached(opIdx);
    }

    bool consumersCached(size_t opIdx) const {
        return _consumers.isCached(opIdx);
    }

private:
    SortedVecCache<Vec> _deps;
    SortedVecCache<Vec> _consumers;
};

}  // namespace depsort
}  // namespace compile_ahead
