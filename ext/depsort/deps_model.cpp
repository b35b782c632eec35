#include "deps_model.hpp"

#include <cstdint>
#include <utility>

namespace compile_ahead::depsort {

namespace {

constexpr size_t kMaxOptimizeOps = 24576;  // the reachability bitsets take n^2 / 8 bytes

// reach[op] = every op that `op` depends on, directly or not, as a bitset of `words` words.
std::vector<uint64_t> reachability(const std::vector<FlatIndexSet>& deps, size_t count, size_t words) {
    std::vector<uint64_t> reach(count * words, 0);
    std::vector<uint8_t> state(count, 0);  // 0 new, 1 on the stack, 2 done
    std::vector<std::pair<size_t, bool>> stack;
    for (size_t root = 0; root < count; ++root) {
        if (state[root] != 0) {
            continue;
        }
        stack.emplace_back(root, false);
        while (!stack.empty()) {
            auto [op, expanded] = stack.back();
            stack.pop_back();
            if (expanded) {
                uint64_t* row = &reach[op * words];
                for (size_t dep : deps[op]) {
                    row[dep / 64] |= uint64_t{1} << (dep % 64);
                    const uint64_t* depRow = &reach[dep * words];
                    for (size_t w = 0; w < words; ++w) {
                        row[w] |= depRow[w];
                    }
                }
                state[op] = 2;
                continue;
            }
            if (state[op] == 2) {
                continue;
            }
            if (state[op] == 1) {
                throw std::runtime_error("dependency cycle through op " + std::to_string(op));
            }
            state[op] = 1;
            stack.emplace_back(op, true);
            for (size_t dep : deps[op]) {
                if (state[dep] == 1) {
                    throw std::runtime_error("dependency cycle through op " + std::to_string(dep));
                }
                if (state[dep] == 0) {
                    stack.emplace_back(dep, false);
                }
            }
        }
    }
    return reach;
}

}  // namespace

void DepsModel::optimize() {
    if (_count > kMaxOptimizeOps) {
        throw std::length_error("optimize() supports up to " + std::to_string(kMaxOptimizeOps) + " ops");
    }
    const size_t words = (_count + 63) / 64;
    const std::vector<uint64_t> reach = reachability(_deps, _count, words);
    for (size_t op = 0; op < _count; ++op) {
        if (_deps[op].size() <= 1) {
            continue;
        }
        const Vec direct(_deps[op].begin(), _deps[op].end());
        for (size_t dep : direct) {
            for (size_t other : direct) {
                if (other != dep && (reach[other * words + dep / 64] >> (dep % 64)) & 1) {
                    _deps[op].erase(dep);
                    break;
                }
            }
        }
    }
    _cache.onDepsMapRewritten();

    if (!_consumers.empty()) {
        _consumers.clear();
        _cache.onConsumerMapRewritten();
        buildConsumers();
    }
}

}  // namespace compile_ahead::depsort
