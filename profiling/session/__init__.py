"""The ``profile-compile`` session.

compile_profiler  one session: set up, profile each rung, optionally overlay a schedule's run,
                  publish the output directory whole
profile_options   what the session is told beyond the run configuration; the prefill plan
rung_profiling    each profiled compile: a job on the trace, a row of the report
decode_on_rung    decode steps timed on a freshly compiled rung
schedule_overlay  a schedule's run on the same trace
profile_trace     the session's trace: its tracks, the RSS sampler, its validation
profile_tables    the tables printed at the end
rung_profile      one rung compiled with the counters on, its time broken into phases
passprofile       OpenVINO's per-transformation timings (``OV_ENABLE_PROFILE_PASS``)
rss               process resident memory sampled on a background thread
progress_line     a one-line progress display for blocking work
foreign_model     models compiled as they are: any OpenVINO IR or ONNX file
"""
