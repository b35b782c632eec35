#include "counter_window.hpp"

#include <dirent.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace compile_ahead::perf {

namespace {

const EventSpec kEvents[] = {
        {"instructions:u", PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS},
        {"cycles:u", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES},
        {"task-clock", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK},
};

std::vector<int> threadIds() {
    std::vector<int> tids;
    DIR* dir = opendir("/proc/self/task");
    if (dir == nullptr) {
        tids.push_back(static_cast<int>(syscall(SYS_gettid)));
        return tids;
    }
    while (const dirent* entry = readdir(dir)) {
        char* end = nullptr;
        const long tid = std::strtol(entry->d_name, &end, 10);
        if (end != entry->d_name && *end == '\0' && tid > 0) {
            tids.push_back(static_cast<int>(tid));
        }
    }
    closedir(dir);
    std::sort(tids.begin(), tids.end());
    return tids;
}

std::string errnoName(int err) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
    if (const char* name = strerrorname_np(err)) {
        return name;
    }
#endif
    return "errno " + std::to_string(err);
}

std::string paranoidLevel() {
    std::ifstream file("/proc/sys/kernel/perf_event_paranoid");
    std::string level;
    return (file >> level) ? level : "unknown";
}

// Why the kernel refused an event, in words a user can act on.
std::string refusal(const EventSpec& spec, int err) {
    std::string text = "perf_event_open(" + spec.name + "): " + std::strerror(err) + " (" + errnoName(err) + ")";
    if (err == ENOENT && spec.type == PERF_TYPE_HARDWARE) {
        text += ": the kernel exposes no such hardware event (no PMU, e.g. a VM without counters)";
    } else if (err == EACCES || err == EPERM) {
        text += ": not permitted (kernel.perf_event_paranoid is " + paranoidLevel() + ")";
    } else if (err == ENOSYS) {
        text += ": this kernel has no perf_event_open";
    }
    return text;
}

int openEvent(const EventSpec& spec, int tid) {
    perf_event_attr attr;
    std::memset(&attr, 0, sizeof(attr));
    attr.size = sizeof(attr);
    attr.type = spec.type;
    attr.config = spec.config;
    attr.disabled = 1;
    attr.inherit = 1;
    attr.exclude_kernel = 1;
    attr.exclude_hv = 1;
    attr.read_format = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
    return static_cast<int>(syscall(SYS_perf_event_open, &attr, tid, -1, -1, PERF_FLAG_FD_CLOEXEC));
}

}  // namespace

std::optional<EventSpec> eventByName(const std::string& name) {
    for (const EventSpec& spec : kEvents) {
        if (spec.name == name) {
            return spec;
        }
    }
    return std::nullopt;
}

std::vector<std::string> knownEvents() {
    std::vector<std::string> names;
    for (const EventSpec& spec : kEvents) {
        names.push_back(spec.name);
    }
    return names;
}

CounterWindow::CounterWindow(const std::vector<std::string>& names) {
    for (const std::string& name : names) {
        const std::optional<EventSpec> spec = eventByName(name);
        if (!spec) {
            std::string known;
            for (const std::string& k : knownEvents()) {
                known += (known.empty() ? "" : ", ") + k;
            }
            closeAll();
            throw std::invalid_argument("unknown counter '" + name + "'; known: " + known);
        }
        events_.push_back(Event{*spec, {}, {}, {}});
    }
    for (Event& event : events_) {
        openOnThreads(event);
    }
}

CounterWindow::~CounterWindow() { closeAll(); }

void CounterWindow::openOnThreads(Event& event) {
    if (!event.unavailable.empty()) {
        return;
    }
    for (const int tid : threadIds()) {
        if (std::find(event.tids.begin(), event.tids.end(), tid) != event.tids.end()) {
            continue;
        }
        const int fd = openEvent(event.spec, tid);
        if (fd >= 0) {
            event.fds.push_back(fd);
            event.tids.push_back(tid);
            continue;
        }
        const int err = errno;
        if (err == ESRCH) {
            continue;  // the thread ended since it was listed
        }
        // Counted on some threads only, the sum would be too low: the event is unavailable.
        event.unavailable = refusal(event.spec, err);
        for (const int open_fd : event.fds) {
            close(open_fd);
        }
        event.fds.clear();
        event.tids.clear();
        return;
    }
}

void CounterWindow::start() {
    if (started_) {
        throw std::logic_error("a counter window is started once");
    }
    started_ = true;
    for (Event& event : events_) {
        openOnThreads(event);
    }
    for (const Event& event : events_) {
        for (const int fd : event.fds) {
            ioctl(fd, PERF_EVENT_IOC_ENABLE, 0);
        }
    }
}

std::vector<EventReading> CounterWindow::stop() {
    if (!started_ || stopped_) {
        throw std::logic_error("stop() needs a started window, once");
    }
    stopped_ = true;
    for (const Event& event : events_) {
        for (const int fd : event.fds) {
            ioctl(fd, PERF_EVENT_IOC_DISABLE, 0);
        }
    }
    std::vector<EventReading> out;
    for (const Event& event : events_) {
        EventReading reading{event.spec.name, std::nullopt, 0.0, event.unavailable};
        if (event.unavailable.empty()) {
            double total = 0.0;
            uint64_t enabled = 0;
            uint64_t running = 0;
            bool lost = false;
            for (const int fd : event.fds) {
                uint64_t values[3] = {0, 0, 0};  // value, time enabled, time running
                if (read(fd, values, sizeof(values)) != static_cast<ssize_t>(sizeof(values))) {
                    reading.unavailable = "reading " + event.spec.name + " failed: " + std::strerror(errno);
                    lost = true;
                    break;
                }
                enabled += values[1];
                running += values[2];
                if (values[2] == values[1]) {
                    total += static_cast<double>(values[0]);  // counted all along: exact
                } else if (values[2] > 0) {
                    total += static_cast<double>(values[0]) *
                             (static_cast<double>(values[1]) / static_cast<double>(values[2]));
                } else if (values[1] > 0) {  // enabled, never on the PMU: no estimate possible
                    reading.unavailable = event.spec.name + " was never scheduled on the PMU (multiplexed out)";
                    lost = true;
                    break;
                }
            }
            if (!lost) {
                reading.value = total;
                reading.runningFraction =
                        enabled > 0 ? static_cast<double>(running) / static_cast<double>(enabled) : 1.0;
            }
        }
        out.push_back(reading);
    }
    closeAll();
    return out;
}

std::vector<std::pair<std::string, std::string>> CounterWindow::unavailable() const {
    std::vector<std::pair<std::string, std::string>> out;
    for (const Event& event : events_) {
        if (!event.unavailable.empty()) {
            out.emplace_back(event.spec.name, event.unavailable);
        }
    }
    return out;
}

void CounterWindow::closeAll() {
    for (Event& event : events_) {
        for (const int fd : event.fds) {
            close(fd);
        }
        event.fds.clear();
    }
}

}  // namespace compile_ahead::perf
