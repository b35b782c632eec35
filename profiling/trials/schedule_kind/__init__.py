"""The schedule experiment kind (`ab schedule`, `ab baselines`): each trial one fresh
`compile-ahead run` (or an upstream pipeline), endpoints from its report.

kind            the kind as the engine runs it: experiment.json keys, analysis
experiment      the experiment: arms, commands, endpoints, readiness and agreement tallies
genai_trial     one openvino-genai LLMPipeline trial (a baseline arm)
upstream_trial  one OpenVINO NPUW LLM pipeline trial (a baseline arm)
baselines       which upstream baselines exist and how they are described
"""
