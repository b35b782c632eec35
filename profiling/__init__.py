"""Perfetto traces of device decode against CPU compile, compile-phase counters, A/B trials.

- events and per-phase aggregates come from the in-process ITT collector, read by
  ``compile_ahead.itt_collector`` at the package root (the compile worker reads it too);
- ``passprofile``: OpenVINO's per-transformation timings (``OV_ENABLE_PROFILE_PASS``) on the
  monotonic timeline;
- ``trace_writer`` / ``trace_validate``: streamed Perfetto traces and their structural checks
  (the tests also load traces with Perfetto's own trace processor, tests/trace_processor.py);
- ``rung_profile`` / ``trace_compile`` / ``trace_decode``: a rung's compile broken into
  phases and laid on job tracks; decode steps on a device track;
- ``compile_profiler`` (one session) and ``cli``: the ``profile-compile`` command;
- ``depsort``: the patched NPU compiler's sorted-dependency counters, and the replay;
- ``trials``: A/B trials;
- ``compare``: the compare page, one offline web page of an A/B or a profile.
"""
