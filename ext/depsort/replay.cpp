#include "replay.hpp"

#include <algorithm>
#include <chrono>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>
#include <string>

namespace compile_ahead::depsort {

uint64_t Trace::count(EventKind kind) const {
    return static_cast<uint64_t>(
            std::count_if(events.begin(), events.end(), [kind](const Event& e) { return e.kind() == kind; }));
}

namespace {

uint32_t narrow(size_t value) {
    if (value >= (size_t{1} << Event::kBBits)) {
        throw std::length_error("trace index does not fit " + std::to_string(Event::kBBits) + " bits");
    }
    return static_cast<uint32_t>(value);
}

// Forwards AsyncDepsInfo calls to a model and appends each to the trace.
class Recorder {
public:
    Recorder(Trace& trace, DepsModel& model): _trace(trace), _model(model) {
    }

    DepsModel::Vec deps(size_t op) {
        _trace.events.emplace_back(EventKind::QueryDeps, narrow(op));
        return _model.opDeps(op);
    }
    DepsModel::Vec consumers(size_t op) {
        _trace.events.emplace_back(EventKind::QueryConsumers, narrow(op));
        return _model.consumerOps(op);
    }
    void addDependency(size_t from, size_t to) {
        _trace.events.emplace_back(EventKind::AddDependency, narrow(from), narrow(to));
        _model.addDependency(from, to);
    }
    size_t insertOp(const std::vector<size_t>& deps) {
        _trace.events.emplace_back(EventKind::InsertOp, narrow(_trace.insertDeps.size()), narrow(deps.size()));
        _trace.insertDeps.insert(_trace.insertDeps.end(), deps.begin(), deps.end());
        return _model.insertOp(deps);
    }
    void buildConsumers() {
        _trace.events.emplace_back(EventKind::BuildConsumers, 0);
        _model.buildConsumers();
    }
    void optimize() {
        _trace.events.emplace_back(EventKind::Optimize, 0);
        _model.optimize();
    }
    DepsModel& model() {
        return _model;
    }

private:
    Trace& _trace;
    DepsModel& _model;
};

// One run of the list scheduler over the current maps.
class SchedulingPass {
public:
    SchedulingPass(Recorder& deps, std::vector<bool>& isData, std::vector<uint64_t>& bytes,
                   const SchedulerParams& params, Trace& trace)
            : _deps(deps), _isData(isData), _bytes(bytes), _params(params), _trace(trace) {
    }

    // Returns the compute ops in the order they were scheduled.
    std::vector<size_t> run() {
        _deps.buildConsumers();
        const size_t n = _deps.model().opCount();
        _inDegree.assign(n, 0);
        _remainingConsumers.assign(n, 0);
        _level.assign(n, 0);
        _scheduled.assign(n, false);
        _done.assign(n, false);
        for (size_t op = 0; op < n; ++op) {
            _inDegree[op] = _deps.model().rawDeps(op).size();
            _remainingConsumers[op] = _deps.model().rawConsumers(op).size();
        }
        // init(): levels of compute ops, shared with their dependencies.
        size_t level = 1;
        for (size_t op = 0; op < n; ++op) {
            if (_isData[op]) {
                continue;
            }
            _level[op] = level;
            for (size_t dep : _deps.deps(op)) {
                if (_level[dep] == 0) {
                    _level[dep] = level;
                }
            }
            ++level;
        }
        for (size_t op = 0; op < n; ++op) {
            if (_inDegree[op] == 0) {
                becomeReady(op);
            }
        }
        const uint64_t maxRounds = 20 * static_cast<uint64_t>(n) + 1000;
        uint64_t rounds = 0;
        while (_doneCount < _done.size()) {
            if (++rounds > maxRounds) {
                throw std::runtime_error("replay scheduler made no progress");
            }
            round();
        }
        _trace.rounds += rounds;
        return _order;
    }

private:
    void grow() {
        const size_t n = _deps.model().opCount();
        _inDegree.resize(n, 0);
        _remainingConsumers.resize(n, 0);
        _level.resize(n, 0);
        _scheduled.resize(n, false);
        _done.resize(n, false);
        _isData.resize(n, false);
        _bytes.resize(n, 0);
    }

    void becomeReady(size_t op) {
        if (_isData[op]) {
            // A ready data op already unlocks its consumers (they schedule it on demand).
            _readyData.insert(op);
            for (size_t consumer : _deps.consumers(op)) {
                decrement(consumer);
            }
        } else {
            _readyCompute.insert(op);
        }
    }

    void decrement(size_t op) {
        if (_inDegree[op] > 0 && --_inDegree[op] == 0) {
            becomeReady(op);
        }
    }

    // getBuffersToAllocateForOp: the op's own buffer plus those of ready, unscheduled data deps.
    uint64_t bytesNeeded(size_t op) {
        uint64_t need = _alive.count(op) ? 0 : _bytes[op];
        for (size_t dep : _deps.deps(op)) {
            if (_done[dep] || _scheduled[dep]) {
                continue;
            }
            if (_readyData.count(dep)) {
                need += bytesNeeded(dep);
            }
        }
        return need;
    }

    // getCurrentCycleAndExecutorInstanceMask: the latest end cycle among the dependencies.
    uint64_t earliestCycle(size_t op) {
        uint64_t cycle = _cycle;
        for (size_t dep : _deps.deps(op)) {
            cycle = std::max(cycle, _endCycle.count(dep) ? _endCycle[dep] : _cycle);
        }
        return cycle;
    }

    void schedule(size_t op) {
        _scheduled[op] = true;
        _readyData.erase(op);
        _readyCompute.erase(op);
        _endCycle[op] = earliestCycle(op) + 1;
        if (_alive.emplace(op, _bytes[op]).second) {
            _used += _bytes[op];
        }
        _inFlight.push_back(op);
        if (!_isData[op]) {
            _order.push_back(op);
        }
    }

    // scheduleDependencies + scheduleOp.
    void scheduleWithDependencies(size_t op) {
        for (size_t dep : _deps.deps(op)) {
            if (!_done[dep] && !_scheduled[dep] && _readyData.count(dep)) {
                earliestCycle(dep);
                schedule(dep);
            }
        }
        schedule(op);
    }

    bool fits(uint64_t need) const {
        return _used + need <= _params.memoryBytes;
    }

    void round() {
        ++_cycle;
        bool scheduledCompute = false;
        if (!_readyCompute.empty()) {
            const size_t head = *_readyCompute.begin();
            const uint64_t need = bytesNeeded(head);
            earliestCycle(head);
            if (fits(need) || (_inFlight.empty() && !spill(head))) {
                scheduleWithDependencies(head);
                scheduledCompute = true;
                _currentLevel = std::max(_currentLevel, _level[head]);
            }
        }
        if (scheduledCompute) {
            prefetch();
        }
        if (_inFlight.empty() && _readyCompute.empty() && !_readyData.empty()) {
            // Only data ops left (e.g. outputs of data chains): schedule the first one.
            const size_t op = *_readyData.begin();
            bytesNeeded(op);
            schedule(op);
        }
        complete();
    }

    void prefetch() {
        const std::vector<size_t> candidates(_readyData.begin(), _readyData.end());
        for (size_t op : candidates) {
            if (!_readyData.count(op)) {
                continue;
            }
            size_t level = _level[op];
            if (_spillReads.count(op)) {
                level = std::numeric_limits<size_t>::max();
                for (size_t consumer : _deps.consumers(op)) {
                    if (!_done[consumer] && !_scheduled[consumer]) {
                        level = std::min(level, _level[consumer]);
                    }
                }
            }
            if (level > _currentLevel + _params.prefetchLevels) {
                continue;
            }
            const uint64_t need = bytesNeeded(op);
            earliestCycle(op);
            if (fits(need)) {
                schedule(op);
            }
        }
    }

    void complete() {
        std::vector<size_t> finished;
        finished.swap(_inFlight);
        for (size_t op : finished) {
            _done[op] = true;
            ++_doneCount;
        }
        for (size_t op : finished) {
            if (!_isData[op]) {
                for (size_t consumer : _deps.consumers(op)) {
                    decrement(consumer);
                }
            }
            for (size_t dep : _deps.deps(op)) {
                release(dep);
            }
            if (_remainingConsumers[op] == 0) {
                freeBuffer(op);
            }
        }
    }

    void release(size_t op) {
        if (_remainingConsumers[op] > 0 && --_remainingConsumers[op] == 0) {
            freeBuffer(op);
        }
    }

    void freeBuffer(size_t op) {
        auto it = _alive.find(op);
        if (it != _alive.end()) {
            _used -= it->second;
            _alive.erase(it);
        }
    }

    // Dynamic spill: evict the alive buffer whose next consumer is furthest away, through a
    // spill-write op and a spill-read op inserted into the maps. False when nothing can go.
    bool spill(size_t head) {
        size_t victim = std::numeric_limits<size_t>::max();
        size_t bestNext = 0;
        uint32_t examined = 0;
        for (const auto& [op, size] : _alive) {
            if (examined++ == _params.evictionCandidates) {
                break;
            }
            if (op == head || size == 0 || !_done[op]) {
                continue;
            }
            size_t next = std::numeric_limits<size_t>::max();
            for (size_t consumer : _deps.consumers(op)) {
                if (!_done[consumer] && !_scheduled[consumer]) {
                    next = std::min(next, consumer);
                }
            }
            if (next == head) {
                continue;
            }
            if (victim == std::numeric_limits<size_t>::max() || next > bestNext) {
                victim = op;
                bestNext = next;
            }
        }
        if (victim == std::numeric_limits<size_t>::max()) {
            return false;
        }
        std::vector<size_t> waiting;
        for (size_t consumer : _deps.consumers(victim)) {
            if (!_done[consumer] && !_scheduled[consumer]) {
                waiting.push_back(consumer);
            }
        }
        const size_t write = _deps.insertOp({victim});
        _deps.addDependency(victim, write);
        const size_t read = _deps.insertOp({write});
        _deps.addDependency(write, read);
        grow();
        _isData[read] = true;
        _bytes[read] = _alive[victim];
        _spillReads.insert(read);
        for (size_t consumer : waiting) {
            _deps.addDependency(read, consumer);
            ++_remainingConsumers[read];
            ++_inDegree[consumer];
        }
        freeBuffer(victim);
        _remainingConsumers[victim] = 0;
        _scheduled[write] = _done[write] = true;
        ++_doneCount;
        _remainingConsumers[write] = 1;
        _inDegree[read] = 0;
        becomeReady(read);
        ++_trace.spills;
        return true;
    }

    Recorder& _deps;
    std::vector<bool>& _isData;
    std::vector<uint64_t>& _bytes;
    const SchedulerParams& _params;
    Trace& _trace;

    std::vector<size_t> _inDegree;
    std::vector<size_t> _remainingConsumers;
    std::vector<size_t> _level;
    std::vector<bool> _scheduled;
    std::vector<bool> _done;
    size_t _doneCount = 0;
    std::set<size_t> _readyCompute;
    std::set<size_t> _readyData;
    std::set<size_t> _spillReads;
    std::map<size_t, uint64_t> _alive;
    std::map<size_t, uint64_t> _endCycle;
    std::vector<size_t> _inFlight;
    std::vector<size_t> _order;
    uint64_t _used = 0;
    uint64_t _cycle = 0;
    size_t _currentLevel = 0;
};

uint64_t mix(uint64_t hash, const DepsModel::Vec& answer) {
    hash = (hash ^ (answer.size() + 0x51ull)) * 0x100000001B3ull;
    for (size_t value : answer) {
        hash = (hash ^ (value + 1)) * 0x100000001B3ull;
    }
    return hash;
}

}  // namespace

Trace record(const std::vector<std::vector<size_t>>& deps, const std::vector<bool>& isData,
             const std::vector<uint64_t>& bytes, const SchedulerParams& params) {
    if (isData.size() != deps.size() || bytes.size() != deps.size()) {
        throw std::invalid_argument("deps, is_data and bytes must have one entry per op");
    }
    Trace trace;
    trace.initialDeps = deps;
    DepsModel model(deps, QueryPath::Cache, Mode::Cached);
    Recorder recorder(trace, model);
    std::vector<bool> data = isData;
    std::vector<uint64_t> sizes = bytes;
    for (uint32_t pass = 0; pass < params.passes; ++pass) {
        SchedulingPass scheduling(recorder, data, sizes, params, trace);
        const std::vector<size_t> order = scheduling.run();
        if (pass + 1 == params.passes) {
            break;
        }
        // Control edges between consecutive compute ops of this schedule, then optimizeDepsMap
        // and updateTokenDependencies, as the passes after scheduling do.
        for (size_t i = 1; i < order.size(); ++i) {
            recorder.addDependency(order[i - 1], order[i]);
            ++trace.controlEdges;
        }
        if (params.optimizeBetweenPasses) {
            recorder.optimize();
        }
        for (size_t op = 0; op < model.opCount(); ++op) {
            recorder.deps(op);
        }
    }
    return trace;
}

ReplayResult replay(const Trace& trace, QueryPath path, Mode mode) {
    globalCounters().reset();
    ReplayResult result;
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    DepsModel model(trace.initialDeps, path, mode);
    std::vector<size_t> insertBuffer;
    auto runStart = Clock::now();
    bool inRun = false;
    for (const Event& event : trace.events) {
        const EventKind kind = event.kind();
        const bool isQuery = kind == EventKind::QueryDeps || kind == EventKind::QueryConsumers;
        if (isQuery && !inRun) {
            runStart = Clock::now();
            inRun = true;
        } else if (!isQuery && inRun) {
            result.queryNs += static_cast<uint64_t>(
                    std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - runStart).count());
            inRun = false;
        }
        switch (kind) {
        case EventKind::QueryDeps: {
            const DepsModel::Vec answer = model.opDeps(event.a);
            result.elementsReturned += answer.size();
            result.checksum = mix(result.checksum, answer);
            break;
        }
        case EventKind::QueryConsumers: {
            const DepsModel::Vec answer = model.consumerOps(event.a);
            result.elementsReturned += answer.size();
            result.checksum = mix(result.checksum, answer);
            break;
        }
        case EventKind::AddDependency:
            model.addDependency(event.a, event.b());
            break;
        case EventKind::InsertOp:
            insertBuffer.assign(trace.insertDeps.begin() + event.a, trace.insertDeps.begin() + event.a + event.b());
            model.insertOp(insertBuffer);
            break;
        case EventKind::PreAllocate:
            model.preAllocate(event.a);
            break;
        case EventKind::BuildConsumers:
            model.buildConsumers();
            break;
        case EventKind::Optimize:
            model.optimize();
            break;
        }
    }
    const auto stop = Clock::now();
    if (inRun) {
        result.queryNs +=
                static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(stop - runStart).count());
    }
    result.totalNs = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(stop - start).count());
    compile_ahead_depsort_stats stats{};
    globalCounters().snapshot(stats);
    if (path == QueryPath::Upstream) {
        // No cache, no counters on this path: every query was a sort.
        result.requests = trace.count(EventKind::QueryDeps) + trace.count(EventKind::QueryConsumers);
        result.misses = result.requests;
        result.elementsSorted = result.elementsReturned;
        return result;
    }
    result.requests = stats.requests;
    result.hits = stats.hits;
    result.misses = stats.misses;
    result.elementsSorted = stats.elements_sorted;
    result.sortNs = stats.sort_ns;
    result.invalidations = stats.invalidations;
    return result;
}

}  // namespace compile_ahead::depsort
