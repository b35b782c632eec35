// The parts of the ITT notify ABI a collector library sees, written from the public ittnotify
// headers' documented layouts (x86-64 Linux). Only fields the collector reads are relied upon.
#pragma once

#include <pthread.h>

#include <cstddef>
#include <cstdint>

namespace itt_abi {

// A domain as OpenVINO and oneDNN hold it; flags must be non-zero or their macros skip calls.
struct Domain {
    volatile int flags;
    const char* nameA;
    void* nameW;
    int extra1;
    void* extra2;
    Domain* next;
};

struct StringHandle {
    const char* strA;
    void* strW;
    int extra1;
    void* extra2;
    StringHandle* next;
};

// Counter handles are opaque to callers; ours mirror the static library's counter record so a
// handle made before the collector was bound can be read the same way.
struct CounterInfo {
    const char* nameA;
    void* nameW;
    const char* domainA;
    void* domainW;
    int type;
    long index;
    int extra1;
    void* extra2;
    CounterInfo* next;
};

struct Id {
    unsigned long long d1, d2, d3;
};

inline bool is_null(const Id& id) { return id.d1 == 0 && id.d2 == 0 && id.d3 == 0; }

enum MetadataType : int {
    kMetaUnknown = 0,
    kMetaU64,
    kMetaS64,
    kMetaU32,
    kMetaS32,
    kMetaU16,
    kMetaS16,
    kMetaFloat,
    kMetaDouble,
};

// One entry of a statically linked ittnotify copy's API table: the collector stores its own
// implementation (or null_func) through func_ptr.
struct ApiInfo {
    const char* name;
    void** func_ptr;
    void* init_func;
    void* null_func;
    int group;
};

// Head of the per-copy global the static library hands to __itt_api_init (fields up to the
// API table; the rest is not touched).
struct Global {
    unsigned char magic[8];
    unsigned long version_major;
    unsigned long version_minor;
    unsigned long version_build;
    volatile long api_initialized;
    volatile long mutex_initialized;
    volatile long atomic_counter;
    pthread_mutex_t mutex;
    void* lib;
    void* error_handler;
    const char** dll_path_ptr;
    ApiInfo* api_list_ptr;
};

}  // namespace itt_abi
