// Binding of ittnotify API tables to the collector's implementations.
#pragma once

#include <string>
#include <vector>

namespace itt_collector {

// Fills one static ittnotify copy's API table (its __itt_global) with our functions.
void bind_api_table(void* global);

// Shared objects whose ittnotify copy has bound to this collector, in binding order.
std::vector<std::string> bound_libraries();

}  // namespace itt_collector
