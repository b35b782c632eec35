"""What goes on a trace, each on its own tracks.

ladder_run     a ladder run: decode steps on the device track, every compile job on its own
compile_jobs   a profiled compile: one job track with its build and compile phases and passes
decode_steps   decode steps on a device track, one slice per step or per N steps
worker_phases  a compile worker's phases on its compile job's track
pyspy          py-spy samples on the trace clock
"""
