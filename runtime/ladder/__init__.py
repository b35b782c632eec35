"""The ladder runtime: what a run is told in ``settings`` (its configuration, capacities,
schedules, protocol, bounds), and the mechanism here: KV stores, prefill, when rungs compile,
the runner of B >= 1 sequences (each one's state in ``sequence``) and its faults; what a run
tells and reports is in ``reporting``."""
