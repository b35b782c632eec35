// A stand-in for vpux::AsyncDepsInfo without MLIR: the same two maps (op index -> set of op
// indices it depends on / that consume it), the same mutation operations, and the same calls
// into SortedDepsCache at the same places as the compile-ahead patch puts them in the compiler.
#pragma once

#include "flat_index_set.hpp"
#include "sorted_deps_cache.hpp"

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

namespace compile_ahead::depsort {

// How a model answers queries: through the cache in one of its modes, or as upstream does
// (copy and sort on every call, no cache object and no counters at all).
enum class QueryPath { Cache, Upstream };

class DepsModel {
public:
    using Vec = std::vector<size_t>;

    // buildDepsMap: one op per entry of `deps`, each with the ops it depends on.
    DepsModel(const std::vector<std::vector<size_t>>& deps, QueryPath path, Mode mode)
            : _path(path), _cache(mode) {
        _deps.resize(deps.size());
        _count = deps.size();
        _cache.onDepsMapResized(_deps.size());
        for (size_t op = 0; op < deps.size(); ++op) {
            addExecOp(op, deps[op]);
        }
    }

    size_t opCount() const {
        return _count;
    }
    size_t capacity() const {
        return _deps.size();
    }
    bool consumersBuilt() const {
        return !_consumers.empty();
    }

    void addDependency(size_t from, size_t to) {
        checkIndex(from);
        checkIndex(to);
        if (_deps[to].insert(from)) {
            _cache.onDepInserted(to);
        }
        if (!_consumers.empty() && _consumers[from].insert(to)) {
            _cache.onConsumerInserted(from);
        }
    }

    // insertNewExecOpToDepsMap: the new op takes the next index, growing the maps by one when
    // no room was pre-allocated. Like upstream, the consumer map is not told about its deps.
    size_t insertOp(const std::vector<size_t>& deps) {
        if (_count == _deps.size()) {
            preAllocate(1);
        }
        for (size_t dep : deps) {
            checkIndex(dep);
        }
        addExecOp(_count, deps);
        return _count++;
    }

    void preAllocate(size_t extra) {
        const size_t size = _deps.size() + extra;
        _deps.resize(size);
        _consumers.resize(size);
        _cache.onDepsMapResized(size);
        _cache.onConsumerMapResized(size);
    }

    void buildConsumers() {
        _consumers.resize(_deps.size());
        _cache.onConsumerMapResized(_consumers.size());
        for (size_t op = 0; op < _deps.size(); ++op) {
            for (size_t dep : _deps[op]) {
                if (_consumers[dep].insert(op)) {
                    _cache.onConsumerInserted(dep);
                }
            }
        }
    }

    // Transitive reduction: drop a dependency that another dependency already implies.
    // (The compile-ahead implementation; the point here is which sets change, and when.)
    void optimize();

    Vec opDeps(size_t op) {
        checkIndex(op);
        if (_path == QueryPath::Upstream) {
            return sortedCopy<Vec>(_deps[op]);
        }
        return _cache.deps(op, _deps[op]);
    }

    Vec consumerOps(size_t op) {
        if (_consumers.empty()) {
            throw std::logic_error("consumer map was not built");
        }
        checkIndex(op);
        if (_path == QueryPath::Upstream) {
            return sortedCopy<Vec>(_consumers[op]);
        }
        return _cache.consumers(op, _consumers[op]);
    }

    // The sets as stored (bucket order), bypassing the cache: what a test sorts as reference.
    Vec rawDeps(size_t op) const {
        checkIndex(op);
        return Vec(_deps[op].begin(), _deps[op].end());
    }
    Vec rawConsumers(size_t op) const {
        checkIndex(op);
        if (_consumers.empty()) {
            throw std::logic_error("consumer map was not built");
        }
        return Vec(_consumers[op].begin(), _consumers[op].end());
    }

    bool depsCached(size_t op) const {
        return _cache.depsCached(op);
    }
    bool consumersCached(size_t op) const {
        return _cache.consumersCached(op);
    }

    // Test hook: change a set the way a forgotten mutation point would, without invalidating.
    void insertDepWithoutInvalidation(size_t from, size_t to) {
        checkIndex(from);
        checkIndex(to);
        _deps[to].insert(from);
    }

private:
    void addExecOp(size_t op, const std::vector<size_t>& deps) {
        for (size_t dep : deps) {
            if (_deps[op].insert(dep)) {
                _cache.onDepInserted(op);
            }
        }
    }

    void checkIndex(size_t op) const {
        if (op >= _count) {
            throw std::out_of_range("op index " + std::to_string(op) + " out of range (" + std::to_string(_count) +
                                    " ops)");
        }
    }

    QueryPath _path;
    SortedDepsCache<Vec> _cache;
    std::vector<FlatIndexSet> _deps;
    std::vector<FlatIndexSet> _consumers;
    size_t _count = 0;
};

}  // namespace compile_ahead::depsort
