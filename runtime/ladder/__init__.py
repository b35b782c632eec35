"""The ladder runtime: capacities, schedules, KV stores, when rungs compile, the runner, its
events and
reports."""
