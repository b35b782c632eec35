// The always-present native module: proves the build links the pinned OpenVINO release.
#include <pybind11/pybind11.h>

#include <openvino/core/version.hpp>

namespace py = pybind11;

PYBIND11_MODULE(_native, m) {
    m.doc() = "compile_ahead native core: build facts of the linked OpenVINO runtime";
    m.def(
        "openvino_build_number",
        [] { return std::string(ov::get_openvino_version().buildNumber); },
        "Build number of the libopenvino this module is linked against.");
}
