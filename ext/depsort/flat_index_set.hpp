// An open-addressing set of op indices shaped like the compiler's llvm::DenseSet<size_t>:
// power-of-two bucket array (at least 64 buckets once anything is inserted), linear probing,
// tombstones on erase, iteration in bucket order. Iterating it scans every bucket, which is part
// of what an uncached getOpDeps() pays for; the replay uses it so the comparison stays honest.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <vector>

namespace compile_ahead::depsort {

class FlatIndexSet {
public:
    static constexpr size_t kEmpty = ~size_t{0};
    static constexpr size_t kTombstone = ~size_t{0} - 1;
    static constexpr size_t kMinBuckets = 64;

    class const_iterator {
    public:
        using iterator_category = std::forward_iterator_tag;
        using value_type = size_t;
        using difference_type = std::ptrdiff_t;
        using pointer = const size_t*;
        using reference = const size_t&;

        const_iterator(const size_t* pos, const size_t* end): _pos(pos), _end(end) {
            skip();
        }
        reference operator*() const {
            return *_pos;
        }
        const_iterator& operator++() {
            ++_pos;
            skip();
            return *this;
        }
        const_iterator operator++(int) {
            const_iterator before = *this;
            ++*this;
            return before;
        }
        bool operator==(const const_iterator& other) const {
            return _pos == other._pos;
        }
        bool operator!=(const const_iterator& other) const {
            return _pos != other._pos;
        }

    private:
        void skip() {
            while (_pos != _end && (*_pos == kEmpty || *_pos == kTombstone)) {
                ++_pos;
            }
        }
        const size_t* _pos;
        const size_t* _end;
    };

    size_t size() const {
        return _size;
    }
    bool empty() const {
        return _size == 0;
    }
    const_iterator begin() const {
        return const_iterator(_buckets.data(), _buckets.data() + _buckets.size());
    }
    const_iterator end() const {
        const size_t* stop = _buckets.data() + _buckets.size();
        return const_iterator(stop, stop);
    }

    bool contains(size_t value) const {
        return !_buckets.empty() && _buckets[find(value)] == value;
    }

    // True when the value was not present (like DenseSet::insert(...).second).
    bool insert(size_t value) {
        if (_buckets.empty() || (_size + _tombstones + 1) * 4 > _buckets.size() * 3) {
            rehash(2 * (_size + 1));
        }
        size_t slot = find(value);
        if (_buckets[slot] == value) {
            return false;
        }
        size_t firstFree = slot;
        // find() stops at the value or an empty bucket; reuse the first tombstone on the way.
        for (size_t i = home(value);; i = (i + 1) & mask()) {
            if (_buckets[i] == kTombstone || _buckets[i] == kEmpty) {
                firstFree = i;
                break;
            }
        }
        if (_buckets[firstFree] == kTombstone) {
            --_tombstones;
        }
        _buckets[firstFree] = value;
        ++_size;
        return true;
    }

    bool erase(size_t value) {
        if (_buckets.empty()) {
            return false;
        }
        const size_t slot = find(value);
        if (_buckets[slot] != value) {
            return false;
        }
        _buckets[slot] = kTombstone;
        --_size;
        ++_tombstones;
        return true;
    }

    void clear() {
        _buckets.clear();
        _size = 0;
        _tombstones = 0;
    }

private:
    size_t mask() const {
        return _buckets.size() - 1;
    }
    size_t home(size_t value) const {
        // Fibonacci hashing onto the bucket array.
        return static_cast<size_t>((static_cast<uint64_t>(value) * 0x9E3779B97F4A7C15ull) >> (64 - _shift));
    }
    // The bucket holding `value`, or the empty bucket where its probe sequence ends.
    size_t find(size_t value) const {
        for (size_t i = home(value);; i = (i + 1) & mask()) {
            if (_buckets[i] == value || _buckets[i] == kEmpty) {
                return i;
            }
        }
    }
    void rehash(size_t atLeast) {
        size_t buckets = kMinBuckets;
        while (buckets * 3 < atLeast * 4 + 4) {
            buckets *= 2;
        }
        std::vector<size_t> old;
        old.swap(_buckets);
        _buckets.assign(buckets, kEmpty);
        _shift = 0;
        while ((size_t{1} << _shift) < buckets) {
            ++_shift;
        }
        _size = 0;
        _tombstones = 0;
        for (size_t value : old) {
            if (value != kEmpty && value != kTombstone) {
                _buckets[find(value)] = value;
                ++_size;
            }
        }
    }

    std::vector<size_t> _buckets;
    size_t _size = 0;
    size_t _tombstones = 0;
    unsigned _shift = 0;
};

}  // namespace compile_ahead::depsort
