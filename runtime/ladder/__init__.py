"""The ladder runtime: capacities, schedules, KV stores, prefill, when rungs compile, the
runner of B >= 1 sequences (each one's state in ``sequence``), its faults and its
configuration; what a run tells and reports is in ``reporting``."""
