"""The serve experiment kind (`ab serve`): each trial one fresh `compile-ahead serve` of one
trace under one compile policy, endpoints from its serving report.

kind        the kind as the engine runs it: experiment.json keys, analysis, count rows
experiment  the arms (policies) and each trial's `compile-ahead serve` command
endpoints   the serving report's endpoints (shared with benchmarks/serving/policies_paired.py)
workload    the trace: a request file, or the seeded generator's values (shared likewise)
run         the trace written once, the trials run, the report
"""
