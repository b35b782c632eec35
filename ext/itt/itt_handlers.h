// Binding of ittnotify API tables to the collector's implementations.
#pragma once

#include <array>
#include <string>
#include <vector>

namespace itt_collector {

// The CPU plugin's and oneDNN's per-node inference domains: muted until unmuted.
inline constexpr std::array<const char*, 3> kInferenceDomains{
    "ov::op::cpu::exec", "ov::op::cpu::details", "dnnl::primitive::execute"};

// Fills one static ittnotify copy's API table (its __itt_global) with our functions.
void bind_api_table(void* global);

// Mute or unmute a domain by name: its flags drop to 0, so instrumented libraries skip their
// ITT calls for it (no call, no cost). Applies to domains seen so far and to later ones. Change
// it between phases: a span begun before muting is not ended while muted.
void set_domain_enabled(const std::string& name, bool enabled);
std::vector<std::string> muted_domains();
std::vector<std::string> inference_domains();
std::vector<std::string> seen_domains();

// Cost of one recorded task (begin + end through the ITT entry points), in ns per pair. The
// tasks are recorded like any other (domain "compile_ahead.selftest"); reset() afterwards.
double measure_task_cost_ns(int pairs);

// Shared objects whose ittnotify copy has bound to this collector, in binding order.
std::vector<std::string> bound_libraries();

}  // namespace itt_collector
