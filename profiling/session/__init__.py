"""The ``profile-compile`` session.

compile_profiler  one session: set up, profile each rung, optionally overlay a schedule's run
rung_profile      one rung compiled with the counters on, its time broken into phases
passprofile       OpenVINO's per-transformation timings (``OV_ENABLE_PROFILE_PASS``)
rss               process resident memory sampled on a background thread
progress_line     a one-line progress display for blocking work
foreign_model     models compiled as they are: any OpenVINO IR or ONNX file
"""
