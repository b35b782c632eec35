// Binding of ittnotify API tables to the collector's implementations.
#pragma once

#include <string>
#include <vector>

namespace itt_collector {

// Fills one static ittnotify copy's API table (its __itt_global) with our functions.
void bind_api_table(void* global);

// Cost of one recorded task (begin + end through the ITT entry points), in ns per pair. The
// tasks are recorded like any other (domain "compile_ahead.selftest"); reset() afterwards.
double measure_task_cost_ns(int pairs);

// Shared objects whose ittnotify copy has bound to this collector, in binding order.
std::vector<std::string> bound_libraries();

}  // namespace itt_collector
