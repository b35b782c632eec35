// compile_ahead._depsort: the sorted-deps cache as this project builds and tests it, the
// AsyncDepsInfo stand-in, the scheduler replay, and the lookup of a loaded patched compiler.
#include "deps_model.hpp"
#include "loaded_counters.hpp"
#include "replay.hpp"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <stdexcept>
#include <string>

namespace py = pybind11;
using namespace compile_ahead::depsort;

namespace {

struct PathAndMode {
    QueryPath path;
    Mode mode;
};

PathAndMode parseMode(const std::string& name) {
    if (name == "cached") {
        return {QueryPath::Cache, Mode::Cached};
    }
    if (name == "shadow") {
        return {QueryPath::Cache, Mode::Shadow};
    }
    if (name == "uncached") {
        return {QueryPath::Cache, Mode::Uncached};
    }
    if (name == "upstream") {
        return {QueryPath::Upstream, Mode::Uncached};
    }
    throw std::invalid_argument("mode must be one of cached, shadow, uncached, upstream; got '" + name + "'");
}

py::dict statsDict(const compile_ahead_depsort_stats& stats) {
    py::dict out;
    out["version"] = stats.version;
    out["requests"] = stats.requests;
    out["hits"] = stats.hits;
    out["misses"] = stats.misses;
    out["elements_sorted"] = stats.elements_sorted;
    out["sort_ns"] = stats.sort_ns;
    out["invalidations"] = stats.invalidations;
    out["shadow_checks"] = stats.shadow_checks;
    return out;
}

DepsModel makeModel(const std::vector<std::vector<size_t>>& deps, const std::string& mode) {
    const PathAndMode parsed = parseMode(mode);
    return DepsModel(deps, parsed.path, parsed.mode);
}

}  // namespace

PYBIND11_MODULE(_depsort, m) {
    m.doc() = "Memoized sorted dependency vectors (the NPU compiler patch's cache), tested and replayed";

    py::class_<DepsModel>(m, "DepsModel", "AsyncDepsInfo's maps and mutation points, with the cache wired in")
            .def(py::init(&makeModel), py::arg("deps"), py::arg("mode") = "cached")
            .def_property_readonly("op_count", &DepsModel::opCount)
            .def_property_readonly("capacity", &DepsModel::capacity)
            .def_property_readonly("consumers_built", &DepsModel::consumersBuilt)
            .def("add_dependency", &DepsModel::addDependency, py::arg("from_op"), py::arg("to_op"))
            .def("insert_op", &DepsModel::insertOp, py::arg("deps"))
            .def("pre_allocate", &DepsModel::preAllocate, py::arg("count"))
            .def("build_consumers", &DepsModel::buildConsumers)
            .def("optimize", &DepsModel::optimize)
            .def("op_deps", &DepsModel::opDeps, py::arg("op"))
            .def("consumer_ops", &DepsModel::consumerOps, py::arg("op"))
            .def("raw_deps", &DepsModel::rawDeps, py::arg("op"))
            .def("raw_consumers", &DepsModel::rawConsumers, py::arg("op"))
            .def("deps_cached", &DepsModel::depsCached, py::arg("op"))
            .def("consumers_cached", &DepsModel::consumersCached, py::arg("op"))
            .def("insert_dep_without_invalidation", &DepsModel::insertDepWithoutInvalidation, py::arg("from_op"),
                 py::arg("to_op"));

    m.def(
            "counters", [] {
                compile_ahead_depsort_stats stats{};
                compile_ahead_depsort_counters(&stats);
                return statsDict(stats);
            },
            "This module's own process counters (the same getter the patch exports).");
    m.def("reset_counters", [] { compile_ahead_depsort_reset(); });

    m.def(
            "read_loaded_counters",
            []() -> py::object {
                const auto loaded = readLoadedCounters();
                if (!loaded) {
                    return py::none();
                }
                py::dict out = statsDict(loaded->stats);
                out["library"] = loaded->library;
                return std::move(out);
            },
            "Counters of a loaded library exporting compile_ahead_depsort_counters, or None.");
    m.def("reset_loaded_counters", &resetLoadedCounters);

    py::class_<Trace>(m, "Trace", "AsyncDepsInfo calls recorded from one replayed compile")
            .def("__len__", [](const Trace& t) { return t.events.size(); })
            .def_property_readonly("op_count", [](const Trace& t) { return t.initialDeps.size(); })
            .def_readonly("rounds", &Trace::rounds)
            .def_readonly("spills", &Trace::spills)
            .def_readonly("control_edges", &Trace::controlEdges)
            .def("counts", [](const Trace& t) {
                py::dict out;
                out["query_deps"] = t.count(EventKind::QueryDeps);
                out["query_consumers"] = t.count(EventKind::QueryConsumers);
                out["add_dependency"] = t.count(EventKind::AddDependency);
                out["insert_op"] = t.count(EventKind::InsertOp);
                out["build_consumers"] = t.count(EventKind::BuildConsumers);
                out["optimize"] = t.count(EventKind::Optimize);
                return out;
            });

    m.def(
            "record",
            [](const std::vector<std::vector<size_t>>& deps, const std::vector<bool>& isData,
               const std::vector<uint64_t>& bytes, uint64_t memoryBytes, uint32_t prefetchLevels,
               uint32_t evictionCandidates, uint32_t passes, bool optimize) {
                SchedulerParams params;
                params.memoryBytes = memoryBytes;
                params.prefetchLevels = prefetchLevels;
                params.evictionCandidates = evictionCandidates;
                params.passes = passes;
                params.optimizeBetweenPasses = optimize;
                py::gil_scoped_release release;
                return record(deps, isData, bytes, params);
            },
            py::arg("deps"), py::arg("is_data"), py::arg("bytes"), py::arg("memory_bytes") = uint64_t{1} << 21,
            py::arg("prefetch_levels") = 35, py::arg("eviction_candidates") = 8, py::arg("passes") = 2,
            py::arg("optimize") = true, "Run the replay scheduler over an op graph and record its queries.");

    m.def(
            "replay",
            [](const Trace& trace, const std::string& mode) {
                const PathAndMode parsed = parseMode(mode);
                ReplayResult r;
                {
                    py::gil_scoped_release release;
                    r = replay(trace, parsed.path, parsed.mode);
                }
                py::dict out;
                out["requests"] = r.requests;
                out["hits"] = r.hits;
                out["misses"] = r.misses;
                out["elements_sorted"] = r.elementsSorted;
                out["sort_ns"] = r.sortNs;
                out["invalidations"] = r.invalidations;
                out["query_ns"] = r.queryNs;
                out["total_ns"] = r.totalNs;
                out["checksum"] = r.checksum;
                out["elements_returned"] = r.elementsReturned;
                return out;
            },
            py::arg("trace"), py::arg("mode"), "Feed a recorded trace to a fresh model; resets the counters first.");
}
