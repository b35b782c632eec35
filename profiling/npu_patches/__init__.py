"""Support for patches/npu_compiler.

depsort  the patched NPU compiler's memoized dependency-vector sorts, from Python
check    is an npu_compiler checkout ready for the patches? (`compile-ahead patches check`)
"""
