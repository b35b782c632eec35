"""Perfetto traces of device decode against CPU compile, compile-phase counters, A/B trials.

- ``counters``: events and per-phase aggregates from the in-process ITT collector
  (``compile_ahead._itt``), thread names, the patched NPU compiler's counters when loaded;
- ``passprofile``: OpenVINO's per-transformation timings (``OV_ENABLE_PROFILE_PASS``) on the
  monotonic timeline;
- ``trace_writer`` / ``trace_validate`` / ``trace_processor``: streamed Perfetto traces, their
  structural checks, and Perfetto's own trace processor run offline under node;
- ``compile_profile`` / ``trace_compile`` / ``trace_decode``: a rung's compile broken into
  phases and laid on job tracks; decode steps on a device track;
- ``cli``: the ``profile-compile`` command; ``trials``: A/B trials.
"""
