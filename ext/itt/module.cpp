// compile_ahead._itt: the ITT collector library doubles as this Python module, so the events
// OpenVINO reports through ITT are readable from Python in the same process.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "itt_handlers.h"
#include "recorder.h"

namespace py = pybind11;
namespace ic = itt_collector;

namespace {

py::list to_tuples(const std::vector<ic::Event>& evs) {
    const std::vector<std::string> names = ic::strings();
    std::vector<py::str> py_names;
    py_names.reserve(names.size());
    for (const auto& n : names) py_names.emplace_back(py::str(n));
    const py::str kinds[] = {"task", "region", "frame", "marker", "counter", "metadata"};
    py::list out(evs.size());
    size_t i = 0;
    for (const auto& e : evs) {
        out[i++] = py::make_tuple(kinds[int(e.kind)], e.begin_ns, e.end_ns, e.tid, e.depth,
                                  py_names[e.domain], py_names[e.name], e.value, e.id,
                                  py_names[e.text]);
    }
    return out;
}

py::list aggregates() {
    const auto aggs = ic::aggregates();
    const std::vector<std::string> names = ic::strings();
    py::list out;
    for (const auto& [key, a] : aggs) {
        out.append(py::make_tuple(names[key >> 32], names[key & 0xffffffffu], a.count, a.total_ns,
                                  a.max_ns));
    }
    return out;
}

}  // namespace

PYBIND11_MODULE(_itt, m) {
    m.doc() =
        "ITT collector: OpenVINO, its plugins, oneDNN and TBB report tasks, regions, counters, "
        "metadata and thread names here once INTEL_LIBITTNOTIFY64 names this file before "
        "libopenvino loads. Times are CLOCK_MONOTONIC ns (time.monotonic_ns()).";
    m.def("events", [] {
        std::vector<ic::Event> evs;
        {
            py::gil_scoped_release release;
            evs = ic::events();
        }
        return to_tuples(evs);
    },
          "Recorded events as tuples (kind, begin_ns, end_ns, tid, depth, domain, name, value, "
          "id, text); spans appear when they end.");
    m.def("open_spans", [] { return to_tuples(ic::open_spans()); },
          "Spans begun and not yet ended, as event tuples with end_ns = -1.");
    m.def("aggregates", &aggregates,
          "Per (domain, name) span aggregates as tuples (domain, name, count, total_ns, max_ns).");
    m.def("thread_names", [] {
        py::dict out;
        for (const auto& [tid, name] : ic::thread_names()) out[py::int_(tid)] = name;
        return out;
    }, "Names threads gave themselves through ITT, by native thread id.");
    m.def("stats", [] {
        const ic::Stats s = ic::stats();
        py::dict out;
        out["recorded"] = s.recorded;
        out["dropped"] = s.dropped;
        out["unmatched"] = s.unmatched;
        out["open"] = s.open;
        return out;
    }, "Counts: recorded, dropped (over the cap), unmatched ends, spans still open.");
    m.def("reset", &ic::reset, "Forget recorded events and aggregates; open spans stay open.");
    m.def("set_max_events", &ic::set_max_events, py::arg("max_events"),
          "Cap on stored events; past it events are counted as dropped (aggregates continue).");
    m.def("bound_libraries", &ic::bound_libraries,
          "Shared objects whose ITT copy bound to this collector (empty: nothing observed yet).");
    m.def("set_domain_enabled", &ic::set_domain_enabled, py::arg("domain"), py::arg("enabled"),
          "Mute (False) or unmute a domain: instrumented libraries then skip its ITT calls "
          "entirely. Change between phases; a span begun before muting stays open while muted.");
    m.def("muted_domains", &ic::muted_domains);
    m.def("inference_domains", &ic::inference_domains,
          "Per-node inference domains, muted from the start (thousands of spans per decode step).");
    m.def("seen_domains", &ic::seen_domains, "Domains that have reported so far.");
    m.def("measure_task_cost_ns", &ic::measure_task_cost_ns, py::arg("pairs") = 100000,
          "ns per recorded task (begin + end via the ITT entry points); records them, so reset "
          "afterwards.");
    m.def("now_ns", &ic::now_ns, "The collector's clock: CLOCK_MONOTONIC in ns.");
    // Python-side annotations on the same timeline and thread stacks as OpenVINO's own tasks.
    m.def("span_begin", [](const std::string& domain, const std::string& name) {
        ic::begin_span(ic::Kind::Task, ic::intern(domain.c_str()), ic::intern(name.c_str()), 0);
    }, py::arg("domain"), py::arg("name"));
    m.def("span_end", [](const std::string& domain) {
        ic::end_span(ic::Kind::Task, ic::intern(domain.c_str()), 0);
    }, py::arg("domain"));
    m.def("counter_sample", [](const std::string& domain, const std::string& name, double v) {
        ic::record_instant(ic::Kind::Counter, ic::intern(domain.c_str()), ic::intern(name.c_str()),
                           v, 0);
    }, py::arg("domain"), py::arg("name"), py::arg("value"));
}
