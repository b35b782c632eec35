// The collector side of the ITT notify protocol. Every statically linked ittnotify copy
// (libopenvino, its plugins, oneDNN inside them, TBB) loads this library from
// INTEL_LIBITTNOTIFY64 and calls __itt_api_init once with its API table; each entry we
// implement gets our function, every other entry its null stub, so unused calls (e.g. TBB's
// sync notifications) cost the caller one null-pointer check.
#include "itt_handlers.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "itt_abi.h"
#include "recorder.h"

namespace itt_collector {
namespace {

using itt_abi::CounterInfo;
using itt_abi::Domain;
using itt_abi::Id;
using itt_abi::StringHandle;

struct Registry {
    std::mutex mu;
    std::unordered_map<std::string, Domain*> domains;
    std::unordered_map<std::string, StringHandle*> handles;
    std::unordered_map<const void*, double> counter_values;  // running value for inc/dec
    std::unordered_map<const void*, uint32_t> functions;     // task_begin_fn names
    std::vector<std::string> bound_libraries;
    // Every domain struct seen, by name (ours and the static libraries'), and the muted names:
    // a muted domain gets flags = 0, so the libraries' ITT macros skip their calls entirely.
    std::unordered_map<std::string, std::vector<Domain*>> seen_domains;
    // Per-node inference domains start muted: a decode step makes thousands of their spans
    // (about 3,000 for Qwen2.5-0.5B), recording them costs a few percent of every step and
    // fills the event store; the collector is here for compile phases. Unmute to record them.
    std::unordered_set<std::string> muted{kInferenceDomains.begin(), kInferenceDomains.end()};
};

Registry& registry() {
    static Registry* r = new Registry();  // outlives static teardown, like the recorder
    return *r;
}

// Handles may come from the static library (made before we were bound) or from us; both carry
// the name at the documented offset. Cache the interned id per handle, per thread, lock-free.
thread_local std::unordered_map<const void*, uint32_t>* tls_names = nullptr;

uint32_t cached_id(const void* handle, const char* name) {
    if (handle == nullptr) return 0;
    if (tls_names == nullptr) tls_names = new std::unordered_map<const void*, uint32_t>();
    auto it = tls_names->find(handle);
    if (it != tls_names->end()) return it->second;
    const uint32_t id = intern(name);
    tls_names->emplace(handle, id);
    return id;
}

// Caller holds r.mu.
void note_domain_locked(Registry& r, Domain* d) {
    const std::string name = d->nameA ? d->nameA : "";
    std::vector<Domain*>& known = r.seen_domains[name];
    for (Domain* k : known) {
        if (k == d) return;
    }
    known.push_back(d);
    d->flags = r.muted.count(name) ? 0 : 1;
}

uint32_t domain_id(const Domain* d) {
    if (d == nullptr) return 0;
    if (tls_names != nullptr) {
        auto it = tls_names->find(d);
        if (it != tls_names->end()) return it->second;
    }
    {
        Registry& r = registry();
        std::lock_guard<std::mutex> lock(r.mu);
        note_domain_locked(r, const_cast<Domain*>(d));
    }
    return cached_id(d, d->nameA);
}
uint32_t handle_id(const StringHandle* h) { return h ? cached_id(h, h->strA) : 0; }

const char* copy_of(const char* s) { return s ? strdup(s) : strdup(""); }

double read_value(int type, const void* data) {
    if (data == nullptr) return 0.0;
    switch (type) {
        case itt_abi::kMetaS64: return double(*static_cast<const int64_t*>(data));
        case itt_abi::kMetaU32: return double(*static_cast<const uint32_t*>(data));
        case itt_abi::kMetaS32: return double(*static_cast<const int32_t*>(data));
        case itt_abi::kMetaU16: return double(*static_cast<const uint16_t*>(data));
        case itt_abi::kMetaS16: return double(*static_cast<const int16_t*>(data));
        case itt_abi::kMetaFloat: return double(*static_cast<const float*>(data));
        case itt_abi::kMetaDouble: return *static_cast<const double*>(data);
        default: return double(*static_cast<const uint64_t*>(data));
    }
}

// ---- handle creation -------------------------------------------------------------------

Domain* domain_create(const char* name) {
    if (name == nullptr) return nullptr;
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    Domain*& d = r.domains[name];
    if (d == nullptr) {
        d = new Domain{1, copy_of(name), nullptr, 0, nullptr, nullptr};
        note_domain_locked(r, d);
    }
    return d;
}

StringHandle* string_handle_create(const char* name) {
    if (name == nullptr) return nullptr;
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    StringHandle*& h = r.handles[name];
    if (h == nullptr) h = new StringHandle{copy_of(name), nullptr, 0, nullptr, nullptr};
    return h;
}

CounterInfo* counter_create_typed(const char* name, const char* domain, int type) {
    return new CounterInfo{copy_of(name), nullptr, copy_of(domain), nullptr, type, 0, 0, nullptr,
                           nullptr};
}
CounterInfo* counter_create(const char* name, const char* domain) {
    return counter_create_typed(name, domain, itt_abi::kMetaU64);
}
CounterInfo* counter_create_v3(const Domain* domain, const char* name, int type) {
    return counter_create_typed(name, domain ? domain->nameA : "", type);
}
void counter_destroy(CounterInfo*) {}  // handles may still be in flight on other threads

// ---- counters --------------------------------------------------------------------------

void sample_counter(const CounterInfo* c, double value) {
    if (c == nullptr) return;
    record_instant(Kind::Counter, cached_id(&c->domainA, c->domainA), cached_id(c, c->nameA),
                   value, 0);
}

void add_to_counter(const void* key, const CounterInfo* c, double delta) {
    double value;
    {
        Registry& r = registry();
        std::lock_guard<std::mutex> lock(r.mu);
        value = (r.counter_values[key] += delta);
    }
    sample_counter(c, value);
}

void counter_set_value(CounterInfo* c, void* value) {
    if (c == nullptr) return;
    const double v = read_value(c->type, value);
    {
        Registry& r = registry();
        std::lock_guard<std::mutex> lock(r.mu);
        r.counter_values[c] = v;
    }
    sample_counter(c, v);
}
void counter_set_value_ex(CounterInfo* c, void*, unsigned long long, void* value) {
    counter_set_value(c, value);
}
void counter_inc(CounterInfo* c) { add_to_counter(c, c, 1.0); }
void counter_inc_delta(CounterInfo* c, unsigned long long d) { add_to_counter(c, c, double(d)); }
void counter_dec(CounterInfo* c) { add_to_counter(c, c, -1.0); }
void counter_dec_delta(CounterInfo* c, unsigned long long d) { add_to_counter(c, c, -double(d)); }

// v3 counters are named by (domain, string handle) instead of a counter handle.
void add_to_named_counter(const Domain* d, const StringHandle* h, double delta) {
    if (h == nullptr) return;
    double value;
    {
        Registry& r = registry();
        std::lock_guard<std::mutex> lock(r.mu);
        value = (r.counter_values[h] += delta);
    }
    record_instant(Kind::Counter, domain_id(d), handle_id(h), value, 0);
}
void counter_inc_v3(const Domain* d, StringHandle* h) { add_to_named_counter(d, h, 1.0); }
void counter_inc_delta_v3(const Domain* d, StringHandle* h, unsigned long long v) {
    add_to_named_counter(d, h, double(v));
}
void counter_dec_v3(const Domain* d, StringHandle* h) { add_to_named_counter(d, h, -1.0); }
void counter_dec_delta_v3(const Domain* d, StringHandle* h, unsigned long long v) {
    add_to_named_counter(d, h, -double(v));
}

// ---- spans -----------------------------------------------------------------------------

void task_begin(const Domain* d, Id, Id, StringHandle* name) {
    begin_span(Kind::Task, domain_id(d), handle_id(name), 0);
}

uint32_t function_name(void* fn) {
    Registry& r = registry();
    {
        std::lock_guard<std::mutex> lock(r.mu);
        auto it = r.functions.find(fn);
        if (it != r.functions.end()) return it->second;
    }
    Dl_info info{};
    std::string name;
    if (dladdr(fn, &info) != 0 && info.dli_sname != nullptr) {
        name = info.dli_sname;
    } else {
        char buf[32];
        snprintf(buf, sizeof buf, "fn@%p", fn);
        name = buf;
    }
    const uint32_t id = intern(name.c_str());
    std::lock_guard<std::mutex> lock(r.mu);
    r.functions.emplace(fn, id);
    return id;
}

void task_begin_fn(const Domain* d, Id, Id, void* fn) {
    begin_span(Kind::Task, domain_id(d), function_name(fn), 0);
}
void task_end(const Domain* d) { end_span(Kind::Task, domain_id(d), 0); }

void task_begin_overlapped(const Domain* d, Id id, Id, StringHandle* name) {
    begin_span(Kind::Task, domain_id(d), handle_id(name), id.d1 ? id.d1 : 0);
}
void task_end_overlapped(const Domain* d, Id id) { end_span(Kind::Task, domain_id(d), id.d1); }

void region_begin(const Domain* d, Id id, Id, StringHandle* name) {
    begin_span(Kind::Region, domain_id(d), handle_id(name), id.d1);
}
void region_end(const Domain* d, Id id) { end_span(Kind::Region, domain_id(d), id.d1); }

// Frames have no name of their own: the domain names them.
void frame_begin_v3(const Domain* d, Id* id) {
    const uint32_t dom = domain_id(d);
    begin_span(Kind::Frame, dom, dom, id ? id->d1 : 0);
}
void frame_end_v3(const Domain* d, Id* id) { end_span(Kind::Frame, domain_id(d), id ? id->d1 : 0); }

// ---- instants, metadata, threads ---------------------------------------------------------

void marker(const Domain* d, Id id, StringHandle* name, int) {
    record_instant(Kind::Marker, domain_id(d), handle_id(name), 0.0, id.d1);
}

void metadata_add(const Domain* d, Id id, StringHandle* key, int type, size_t count, void* data) {
    if (count == 0) return;
    record_instant(Kind::Metadata, domain_id(d), handle_id(key), read_value(type, data), id.d1);
}

void metadata_str_add(const Domain* d, Id id, StringHandle* key, const char* data, size_t length) {
    if (data == nullptr) return;
    const std::string text = length ? std::string(data, strnlen(data, length)) : std::string(data);
    record_instant(Kind::Metadata, domain_id(d), handle_id(key), 0.0, id.d1, intern(text.c_str()));
}

void thread_set_name(const char* name) { set_thread_name(name); }

unsigned long long get_timestamp() { return (unsigned long long)now_ns(); }

struct Binding {
    const char* name;
    void* fn;
};

#define ITT_BIND(fn) {"__itt_" #fn, reinterpret_cast<void*>(&fn)}
const Binding kBindings[] = {
    ITT_BIND(domain_create),
    ITT_BIND(string_handle_create),
    ITT_BIND(counter_create),
    ITT_BIND(counter_create_typed),
    ITT_BIND(counter_create_v3),
    ITT_BIND(counter_destroy),
    ITT_BIND(counter_set_value),
    ITT_BIND(counter_set_value_ex),
    ITT_BIND(counter_inc),
    ITT_BIND(counter_inc_delta),
    ITT_BIND(counter_dec),
    ITT_BIND(counter_dec_delta),
    ITT_BIND(counter_inc_v3),
    ITT_BIND(counter_inc_delta_v3),
    ITT_BIND(counter_dec_v3),
    ITT_BIND(counter_dec_delta_v3),
    ITT_BIND(task_begin),
    ITT_BIND(task_begin_fn),
    ITT_BIND(task_end),
    ITT_BIND(task_begin_overlapped),
    ITT_BIND(task_end_overlapped),
    ITT_BIND(region_begin),
    ITT_BIND(region_end),
    ITT_BIND(frame_begin_v3),
    ITT_BIND(frame_end_v3),
    ITT_BIND(marker),
    ITT_BIND(metadata_add),
    ITT_BIND(metadata_str_add),
    ITT_BIND(thread_set_name),
    ITT_BIND(get_timestamp),
};
#undef ITT_BIND

// Handle creators and value-returning entries stay real in the null mode.
bool returns_value(const char* name) {
    return strstr(name, "_create") != nullptr || strcmp(name, "__itt_get_timestamp") == 0;
}

// Every recording entry returns void and the x86-64 SysV caller owns its arguments, so one empty
// function can stand in for all of them.
void record_nothing() {}

void* implementation_of(const char* name) {
    for (const Binding& b : kBindings) {
        if (strcmp(b.name, name) == 0) return b.fn;
    }
    return nullptr;
}

}  // namespace

void bind_api_table(void* global) {
    auto* g = static_cast<itt_abi::Global*>(global);
    if (g == nullptr || g->api_list_ptr == nullptr) return;
    // COMPILE_AHEAD_ITT_RECORD=0: bind the same entries, so the libraries see the same collector
    // and make the same calls (TBB, for one, picks its scheduling path by whether a collector
    // bound anything), but record nothing: isolates the cost of recording itself.
    const char* record = getenv("COMPILE_AHEAD_ITT_RECORD");
    const bool record_off = record != nullptr && strcmp(record, "0") == 0;
    for (itt_abi::ApiInfo* e = g->api_list_ptr; e->name != nullptr; ++e) {
        if (e->func_ptr == nullptr) continue;
        void* mine = implementation_of(e->name);
        if (mine != nullptr && record_off && !returns_value(e->name)) {
            mine = reinterpret_cast<void*>(&record_nothing);
        }
        *e->func_ptr = mine ? mine : e->null_func;
    }
    Dl_info info{};
    const char* where = (dladdr(global, &info) != 0 && info.dli_fname) ? info.dli_fname : "?";
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    r.bound_libraries.emplace_back(where);
}

void set_domain_enabled(const std::string& name, bool enabled) {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    if (enabled) {
        r.muted.erase(name);
    } else {
        r.muted.insert(name);
    }
    for (Domain* d : r.seen_domains[name]) d->flags = enabled ? 1 : 0;
}

std::vector<std::string> inference_domains() {
    return {kInferenceDomains.begin(), kInferenceDomains.end()};
}

std::vector<std::string> muted_domains() {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    return {r.muted.begin(), r.muted.end()};
}

std::vector<std::string> seen_domains() {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    std::vector<std::string> out;
    for (const auto& [name, known] : r.seen_domains) out.push_back(name);
    return out;
}

double measure_task_cost_ns(int pairs) {
    // Through the same entry points a bound library calls, on a domain of our own.
    Domain* d = domain_create("compile_ahead.selftest");
    StringHandle* h = string_handle_create("selftest task");
    const Id null_id{0, 0, 0};
    const int64_t t0 = now_ns();
    for (int i = 0; i < pairs; ++i) {
        task_begin(d, null_id, null_id, h);
        task_end(d);
    }
    const int64_t t1 = now_ns();
    return pairs > 0 ? double(t1 - t0) / pairs : 0.0;
}

std::vector<std::string> bound_libraries() {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    return r.bound_libraries;
}

}  // namespace itt_collector

// The v2 collector entry point the static libraries look up with dlsym.
extern "C" __attribute__((visibility("default"))) void __itt_api_init(void* global, int /*groups*/) {
    itt_collector::bind_api_table(global);
}
