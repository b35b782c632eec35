"""Profiling and experiments: Perfetto traces, the profile-compile session, A/B trials,
campaigns and the compare page.

- ``perfetto``: the trace format (streamed writer, structural checks, varints) and opening a
  trace in the Perfetto UI;
- ``traces``: what goes on a trace (a ladder run, profiled compiles, decode steps, a compile
  worker's phases, py-spy samples);
- ``session``: the ``profile-compile`` session (per-rung compile phases, pass timings, RSS,
  models from any IR or ONNX file); compile-phase events come from the in-process ITT
  collector, read by ``compile_ahead.itt_collector`` at the package root;
- ``npu_patches``: support for patches/npu_compiler (sorted-dependency counters, the checkout
  check);
- ``trials``: A/B trials, the engine and its experiment kinds;
- ``campaigns``: grids of A/B experiments, run here or on a Ray cluster;
- ``results_format``: the results the tools write (experiment.json, trials.jsonl, a
  profile-compile directory, a campaign store), read in one place by every command that reads
  them;
- ``compare``: the compare page, one offline web page of an A/B, a campaign or a profile;
- ``loopback_server``: what `trace open`'s and `compare --open`'s servers share (127.0.0.1,
  a secret token, bounded connections);
- ``browser_open``: an address with a secret opened in the browser, never on a command line.
"""
