#include "loaded_counters.hpp"

#include <dlfcn.h>
#include <link.h>

#include <cstring>
#include <vector>

namespace compile_ahead::depsort {

namespace {

using CountersFn = void (*)(compile_ahead_depsort_stats*);
using ResetFn = void (*)();

constexpr const char* kCountersSymbol = "compile_ahead_depsort_counters";
constexpr const char* kResetSymbol = "compile_ahead_depsort_reset";

struct Found {
    std::string library;
    void* counters = nullptr;
    void* reset = nullptr;
};

int collectPath(dl_phdr_info* info, size_t, void* data) {
    auto* paths = static_cast<std::vector<std::string>*>(data);
    if (info->dlpi_name != nullptr && info->dlpi_name[0] != '\0') {
        paths->emplace_back(info->dlpi_name);
    }
    return 0;
}

std::string libraryOf(void* symbol) {
    Dl_info info{};
    if (dladdr(symbol, &info) != 0 && info.dli_fname != nullptr) {
        return info.dli_fname;
    }
    return "";
}

std::optional<Found> findGetters() {
    void* counters = dlsym(RTLD_DEFAULT, kCountersSymbol);
    if (counters != nullptr) {
        return Found{libraryOf(counters), counters, dlsym(RTLD_DEFAULT, kResetSymbol)};
    }
    std::vector<std::string> paths;
    dl_iterate_phdr(collectPath, &paths);
    for (const std::string& path : paths) {
        // RTLD_NOLOAD: a handle only for objects already loaded; nothing new is loaded.
        void* handle = dlopen(path.c_str(), RTLD_LAZY | RTLD_NOLOAD);
        if (handle == nullptr) {
            continue;
        }
        Found found{path, dlsym(handle, kCountersSymbol), dlsym(handle, kResetSymbol)};
        dlclose(handle);  // drops only the reference taken above; the object stays loaded
        if (found.counters != nullptr) {
            return found;
        }
    }
    return std::nullopt;
}

}  // namespace

std::optional<LoadedCounters> readLoadedCounters() {
    const std::optional<Found> found = findGetters();
    if (!found) {
        return std::nullopt;
    }
    LoadedCounters result{found->library, {}};
    std::memset(&result.stats, 0, sizeof(result.stats));
    reinterpret_cast<CountersFn>(found->counters)(&result.stats);
    return result;
}

bool resetLoadedCounters() {
    const std::optional<Found> found = findGetters();
    if (!found || found->reset == nullptr) {
        return false;
    }
    reinterpret_cast<ResetFn>(found->reset)();
    return true;
}

}  // namespace compile_ahead::depsort
