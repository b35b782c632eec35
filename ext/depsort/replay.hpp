// Replay of the compiler's dependency-query pattern.
//
// record(): runs a small list scheduler over an op graph the way the feasible memory scheduler
// uses AsyncDepsInfo (rounds that re-query the ready compute head, every ready data op and the
// completing ops; spill-op insertions when memory runs out; control edges; optimizeDepsMap;
// a second scheduling pass), and records every AsyncDepsInfo call as a trace.
// replay(): feeds a trace to a fresh DepsModel through one query path and times it.
#pragma once

#include "deps_model.hpp"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace compile_ahead::depsort {

enum class EventKind : uint32_t {
    QueryDeps,
    QueryConsumers,
    AddDependency,
    InsertOp,
    PreAllocate,
    BuildConsumers,
    Optimize,
};

// 8 bytes: a trace of a compile holds tens of millions of these.
struct Event {
    static constexpr uint32_t kBBits = 28;

    Event(EventKind eventKind, uint32_t first, uint32_t second = 0)
            : a(first), kindAndB((static_cast<uint32_t>(eventKind) << kBBits) | second) {
    }
    EventKind kind() const {
        return static_cast<EventKind>(kindAndB >> kBBits);
    }
    uint32_t b() const {
        return kindAndB & ((uint32_t{1} << kBBits) - 1);
    }

    uint32_t a;         // op index; InsertOp: offset into Trace::insertDeps; PreAllocate: count
    uint32_t kindAndB;  // kind in the top 4 bits; AddDependency: `to`; InsertOp: number of deps
};

struct Trace {
    std::vector<std::vector<size_t>> initialDeps;
    std::vector<Event> events;
    std::vector<size_t> insertDeps;
    uint64_t rounds = 0;
    uint64_t spills = 0;
    uint64_t controlEdges = 0;

    uint64_t count(EventKind kind) const;
};

struct SchedulerParams {
    uint64_t memoryBytes = 1u << 21;     // the fast memory ("CMX") the scheduler allocates from
    uint32_t prefetchLevels = 35;        // data ops prefetched up to this many levels ahead
    uint32_t evictionCandidates = 8;     // alive buffers examined per spill decision
    uint32_t passes = 2;                 // scheduling passes (control edges + optimize between)
    bool optimizeBetweenPasses = true;   // run optimizeDepsMap between passes
};

// `isData`: weight / input loads (DMA data ops, prefetched); `bytes`: output buffer sizes.
Trace record(const std::vector<std::vector<size_t>>& deps, const std::vector<bool>& isData,
             const std::vector<uint64_t>& bytes, const SchedulerParams& params);

struct ReplayResult {
    uint64_t requests = 0;
    uint64_t hits = 0;
    uint64_t misses = 0;
    uint64_t elementsSorted = 0;
    uint64_t sortNs = 0;
    uint64_t invalidations = 0;
    uint64_t queryNs = 0;     // time inside runs of consecutive query events
    uint64_t totalNs = 0;     // the whole trace, mutations included
    uint64_t checksum = 0;    // order-sensitive hash of every answer
    uint64_t elementsReturned = 0;
};

// `path` Upstream sorts on every query (no cache, no counters); Cache uses `mode`.
// Resets the process counters of this module before it starts.
ReplayResult replay(const Trace& trace, QueryPath path, Mode mode);

}  // namespace compile_ahead::depsort
