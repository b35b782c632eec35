#include "recorder.h"

#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <mutex>

namespace itt_collector {
namespace {

struct OpenSpan {
    int64_t begin_ns;
    uint32_t name;
    uint32_t domain;
    int32_t tid;
    Kind kind;
    uint16_t depth;
};

// Each thread appends under its own (uncontended) mutex; readers take it only to copy.
struct ThreadBuffer {
    std::mutex mu;
    int32_t tid = 0;
    std::vector<Event> events;
    std::vector<OpenSpan> stack;
    std::unordered_map<uint64_t, Aggregate> aggregates;
};

struct IdKey {
    uint32_t domain;
    uint64_t id;
    bool operator==(const IdKey& o) const { return domain == o.domain && id == o.id; }
};
struct IdKeyHash {
    size_t operator()(const IdKey& k) const { return std::hash<uint64_t>()(k.id * 31 + k.domain); }
};

struct State {
    std::mutex mu;  // thread registry, string table, thread names
    std::vector<std::shared_ptr<ThreadBuffer>> threads;
    std::vector<std::string> strings{""};
    std::unordered_map<std::string, uint32_t> string_ids{{"", 0}};
    std::vector<std::pair<int32_t, std::string>> thread_names;

    std::mutex id_mu;  // spans matched by instance id, possibly across threads
    std::unordered_map<IdKey, OpenSpan, IdKeyHash> open_by_id;

    std::atomic<uint64_t> recorded{0};
    std::atomic<uint64_t> dropped{0};
    std::atomic<uint64_t> unmatched{0};
    std::atomic<uint64_t> max_events{1'000'000};  // ~56 MB
};

// Leaked on purpose: ITT may call in from library destructors after static teardown.
State& state() {
    static State* s = new State();
    return *s;
}

thread_local ThreadBuffer* tls_buffer = nullptr;
thread_local int32_t tls_tid = 0;

ThreadBuffer& buffer() {
    if (tls_buffer == nullptr) {
        auto owned = std::make_shared<ThreadBuffer>();
        owned->tid = current_tid();
        State& s = state();
        std::lock_guard<std::mutex> lock(s.mu);
        s.threads.push_back(owned);
        tls_buffer = owned.get();  // the registry keeps it alive after the thread exits
    }
    return *tls_buffer;
}

// Caller holds b.mu.
void store(ThreadBuffer& b, const Event& e) {
    State& s = state();
    if (s.recorded.load(std::memory_order_relaxed) >= s.max_events.load(std::memory_order_relaxed)) {
        s.dropped.fetch_add(1, std::memory_order_relaxed);
        return;
    }
    s.recorded.fetch_add(1, std::memory_order_relaxed);
    b.events.push_back(e);
}

// Caller holds b.mu.
void complete(ThreadBuffer& b, const OpenSpan& open, int64_t end_ns, uint64_t id) {
    Event e{open.begin_ns, end_ns, 0.0, id, open.name, open.domain, 0, open.tid, open.kind,
            open.depth};
    store(b, e);
    Aggregate& a = b.aggregates[(uint64_t(open.domain) << 32) | open.name];
    const int64_t dur = end_ns - open.begin_ns;
    a.count += 1;
    a.total_ns += dur;
    if (dur > a.max_ns) a.max_ns = dur;
}

}  // namespace

int64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

int32_t current_tid() {
    if (tls_tid == 0) tls_tid = int32_t(syscall(SYS_gettid));
    return tls_tid;
}

uint32_t intern(const char* text) {
    if (text == nullptr) return 0;
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    auto [it, inserted] = s.string_ids.emplace(text, uint32_t(s.strings.size()));
    if (inserted) s.strings.emplace_back(text);
    return it->second;
}

std::vector<std::string> strings() {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    return s.strings;
}

void begin_span(Kind kind, uint32_t domain, uint32_t name, uint64_t id) {
    const int64_t t = now_ns();
    ThreadBuffer& b = buffer();
    std::lock_guard<std::mutex> lock(b.mu);
    OpenSpan open{t, name, domain, b.tid, kind, uint16_t(b.stack.size())};
    if (id == 0) {
        b.stack.push_back(open);
        return;
    }
    State& s = state();
    std::lock_guard<std::mutex> id_lock(s.id_mu);
    s.open_by_id[IdKey{domain, id}] = open;
}

void end_span(Kind kind, uint32_t domain, uint64_t id) {
    const int64_t t = now_ns();
    ThreadBuffer& b = buffer();
    std::lock_guard<std::mutex> lock(b.mu);
    if (id != 0) {
        State& s = state();
        OpenSpan open;
        {
            std::lock_guard<std::mutex> id_lock(s.id_mu);
            auto it = s.open_by_id.find(IdKey{domain, id});
            if (it == s.open_by_id.end()) {
                s.unmatched.fetch_add(1, std::memory_order_relaxed);
                return;
            }
            open = it->second;
            s.open_by_id.erase(it);
        }
        complete(b, open, t, id);
        return;
    }
    // The innermost open span of this kind and domain; tolerate ends that skip a level.
    for (size_t i = b.stack.size(); i-- > 0;) {
        if (b.stack[i].kind == kind && b.stack[i].domain == domain) {
            const OpenSpan open = b.stack[i];
            b.stack.erase(b.stack.begin() + long(i));
            complete(b, open, t, 0);
            return;
        }
    }
    state().unmatched.fetch_add(1, std::memory_order_relaxed);
}

void record_instant(Kind kind, uint32_t domain, uint32_t name, double value, uint64_t id,
                    uint32_t text) {
    const int64_t t = now_ns();
    ThreadBuffer& b = buffer();
    std::lock_guard<std::mutex> lock(b.mu);
    store(b, Event{t, t, value, id, name, domain, text, b.tid, kind, uint16_t(b.stack.size())});
}

void set_thread_name(const char* name) {
    if (name == nullptr) return;
    const int32_t tid = current_tid();
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    for (auto& entry : s.thread_names) {
        if (entry.first == tid) {
            entry.second = name;
            return;
        }
    }
    s.thread_names.emplace_back(tid, name);
}

std::vector<Event> events() {
    State& s = state();
    std::vector<std::shared_ptr<ThreadBuffer>> threads;
    {
        std::lock_guard<std::mutex> lock(s.mu);
        threads = s.threads;
    }
    std::vector<Event> out;
    for (auto& b : threads) {
        std::lock_guard<std::mutex> lock(b->mu);
        out.insert(out.end(), b->events.begin(), b->events.end());
    }
    return out;
}

std::vector<Event> open_spans() {
    State& s = state();
    std::vector<std::shared_ptr<ThreadBuffer>> threads;
    {
        std::lock_guard<std::mutex> lock(s.mu);
        threads = s.threads;
    }
    std::vector<Event> out;
    auto as_event = [](const OpenSpan& o, uint64_t id) {
        return Event{o.begin_ns, -1, 0.0, id, o.name, o.domain, 0, o.tid, o.kind, o.depth};
    };
    for (auto& b : threads) {
        std::lock_guard<std::mutex> lock(b->mu);
        for (const OpenSpan& o : b->stack) out.push_back(as_event(o, 0));
    }
    std::lock_guard<std::mutex> id_lock(s.id_mu);
    for (const auto& [key, o] : s.open_by_id) out.push_back(as_event(o, key.id));
    return out;
}

std::unordered_map<uint64_t, Aggregate> aggregates() {
    State& s = state();
    std::vector<std::shared_ptr<ThreadBuffer>> threads;
    {
        std::lock_guard<std::mutex> lock(s.mu);
        threads = s.threads;
    }
    std::unordered_map<uint64_t, Aggregate> out;
    for (auto& b : threads) {
        std::lock_guard<std::mutex> lock(b->mu);
        for (const auto& [key, a] : b->aggregates) {
            Aggregate& total = out[key];
            total.count += a.count;
            total.total_ns += a.total_ns;
            if (a.max_ns > total.max_ns) total.max_ns = a.max_ns;
        }
    }
    return out;
}

std::vector<std::pair<int32_t, std::string>> thread_names() {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    return s.thread_names;
}

Stats stats() {
    State& s = state();
    Stats out;
    out.recorded = s.recorded.load();
    out.dropped = s.dropped.load();
    out.unmatched = s.unmatched.load();
    std::vector<std::shared_ptr<ThreadBuffer>> threads;
    {
        std::lock_guard<std::mutex> lock(s.mu);
        threads = s.threads;
    }
    for (auto& b : threads) {
        std::lock_guard<std::mutex> lock(b->mu);
        out.open += b->stack.size();
    }
    std::lock_guard<std::mutex> id_lock(s.id_mu);
    out.open += s.open_by_id.size();
    return out;
}

void reset() {
    State& s = state();
    std::vector<std::shared_ptr<ThreadBuffer>> threads;
    {
        std::lock_guard<std::mutex> lock(s.mu);
        threads = s.threads;
    }
    // Open spans stay open: a compile running across the reset still ends cleanly.
    for (auto& b : threads) {
        std::lock_guard<std::mutex> lock(b->mu);
        b->events.clear();
        b->aggregates.clear();
    }
    s.recorded = 0;
    s.dropped = 0;
    s.unmatched = 0;
}

void set_max_events(uint64_t max_events) { state().max_events = max_events; }

}  // namespace itt_collector
