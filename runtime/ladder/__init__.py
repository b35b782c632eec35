"""The ladder runtime: capacities, schedules, KV stores, prefill, when rungs compile, the
runner and its batch decode (batch_runner, batch_config), its faults and its configuration;
what a run tells and reports is in ``reporting``."""
