// Event store of the ITT collector: per-thread buffers of completed spans, instants and counter
// samples on the CLOCK_MONOTONIC timeline (the clock of Python's time.monotonic_ns()).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace itt_collector {

enum class Kind : uint16_t { Task = 0, Region = 1, Frame = 2, Marker = 3, Counter = 4, Metadata = 5 };

struct Event {
    int64_t begin_ns;
    int64_t end_ns;  // == begin_ns for instants and samples
    double value;    // counter value or numeric metadata
    uint64_t id;     // ITT instance id (d1), 0 when none
    uint32_t name;   // interned
    uint32_t domain; // interned
    uint32_t text;   // interned string metadata value, 0 when none
    int32_t tid;
    Kind kind;
    uint16_t depth;  // spans open on the same thread when this one began
};

struct Aggregate {
    uint64_t count = 0;
    int64_t total_ns = 0;
    int64_t max_ns = 0;
};

int64_t now_ns();
int32_t current_tid();

// Interned strings; id 0 is the empty string.
uint32_t intern(const char* text);
std::vector<std::string> strings();

// Span begin/end. A null id (0) nests on the calling thread's stack; a non-zero id is matched
// across threads (ITT regions and overlapped tasks with explicit instance ids).
void begin_span(Kind kind, uint32_t domain, uint32_t name, uint64_t id);
void end_span(Kind kind, uint32_t domain, uint64_t id);
void record_instant(Kind kind, uint32_t domain, uint32_t name, double value, uint64_t id,
                    uint32_t text = 0);
void set_thread_name(const char* name);

struct Stats {
    uint64_t recorded = 0;
    uint64_t dropped = 0;    // over the event cap (aggregates still count them)
    uint64_t unmatched = 0;  // ends without a begin
    uint64_t open = 0;       // spans begun and not yet ended
};

// Readout and control, safe while other threads record.
std::vector<Event> events();
// Spans begun and not yet ended (end_ns = -1), e.g. work still running on a worker thread.
std::vector<Event> open_spans();
std::unordered_map<uint64_t, Aggregate> aggregates();  // key: domain << 32 | name
std::vector<std::pair<int32_t, std::string>> thread_names();
Stats stats();
void reset();
void set_max_events(uint64_t max_events);

}  // namespace itt_collector
