"""The schedule experiment kind (`ab schedule`, `ab baselines`): the seed's replicated
experiment, any schedules side by side. Each trial is one fresh `compile-ahead run --schedule S
... --report OUT` process (or an upstream pipeline); endpoints come from that report, and
boundary readiness and top-1 agreement with the control arm (the first) are counts, not tested
effects.

kind            the kind as the engine runs it: experiment.json keys, analysis
arms            its arms and each trial's command line
endpoints       what it tests, from each trial's report
tallies         what it counts: boundary readiness, top-1 agreement with the control
labels          what the report calls the model, the devices and the arms
run             running it from the command's options
batch           at batch B: each sequence's prompt length, the arms that cannot decode a batch
template        the placeholders of a ``--command`` template
genai_trial     one openvino-genai LLMPipeline trial (a baseline arm)
upstream_trial  one OpenVINO NPUW LLM pipeline trial (a baseline arm)
baselines       which upstream baselines exist and how they are described
"""
