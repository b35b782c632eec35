// One counting window of perf_event_open counters over every thread of this process.
//
// Each event is opened on every thread listed in /proc/self/task, with inherit set, so threads
// those threads create inside the window are counted too (a read sums a counter and its
// inherited children). Events count user space only (exclude_kernel, exclude_hv), which is what
// perf_event_paranoid 2 allows an unprivileged process. An event the kernel refuses is
// unavailable with the reason (the errno text); it is never read as 0.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace compile_ahead::perf {

struct EventSpec {
    std::string name;  // as given: "instructions:u", "cycles:u", "task-clock"
    uint32_t type;     // PERF_TYPE_HARDWARE or PERF_TYPE_SOFTWARE
    uint64_t config;
};

// The events this module knows by name; std::nullopt for any other name.
std::optional<EventSpec> eventByName(const std::string& name);
std::vector<std::string> knownEvents();

struct EventReading {
    std::string name;
    std::optional<double> value;  // scaled by enabled/running time when multiplexed
    double runningFraction = 0.0;  // time running / time enabled (1.0: counted all along)
    std::string unavailable;       // the reason, when value is empty
};

class CounterWindow {
public:
    // Opens every event on every current thread, disabled. Unknown names throw
    // std::invalid_argument; events the kernel refuses are kept as unavailable.
    explicit CounterWindow(const std::vector<std::string>& names);
    ~CounterWindow();
    CounterWindow(const CounterWindow&) = delete;
    CounterWindow& operator=(const CounterWindow&) = delete;

    // Opens the events on threads started since construction, then enables every counter.
    void start();
    // Disables every counter, reads and closes them; the window cannot be started again.
    std::vector<EventReading> stop();
    // name -> reason, for the events that could not be opened.
    std::vector<std::pair<std::string, std::string>> unavailable() const;

private:
    struct Event {
        EventSpec spec;
        std::vector<int> fds;
        std::vector<int> tids;
        std::string unavailable;
    };
    void openOnThreads(Event& event);
    void closeAll();

    std::vector<Event> events_;
    bool started_ = false;
    bool stopped_ = false;
};

}  // namespace compile_ahead::perf
