// compile_ahead._perfcounters: perf_event_open counters around a piece of work, summed over every
// thread of the process (see counter_window.hpp).
#include "counter_window.hpp"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

namespace py = pybind11;
using compile_ahead::perf::CounterWindow;
using compile_ahead::perf::EventReading;

namespace {

py::dict readingsDict(const std::vector<EventReading>& readings) {
    py::dict out;
    for (const EventReading& r : readings) {
        py::dict entry;
        entry["value"] = r.value ? py::cast(*r.value) : py::none();
        entry["running_fraction"] = r.runningFraction;
        entry["unavailable"] = r.unavailable.empty() ? py::none() : py::cast(r.unavailable);
        out[py::str(r.name)] = entry;
    }
    return out;
}

}  // namespace

PYBIND11_MODULE(_perfcounters, m) {
    m.doc() = "perf_event_open counters (user space only) summed over every thread of this process";
    m.def("known_events", &compile_ahead::perf::knownEvents, "The event names CounterWindow accepts.");
    py::class_<CounterWindow>(m, "CounterWindow",
                              "One counting window: open (on every current thread), start(), stop().")
            .def(py::init<const std::vector<std::string>&>(), py::arg("events"))
            .def("start", &CounterWindow::start,
                 "Open the events on threads started since construction, then count.")
            .def(
                    "stop", [](CounterWindow& w) { return readingsDict(w.stop()); },
                    "Stop, read and close: {name: {'value': float | None, 'running_fraction': float, "
                    "'unavailable': reason | None}}.")
            .def_property_readonly(
                    "unavailable",
                    [](const CounterWindow& w) {
                        py::dict out;
                        for (const auto& [name, reason] : w.unavailable()) {
                            out[py::str(name)] = reason;
                        }
                        return out;
                    },
                    "{name: reason} for the events the kernel refused.");
}
