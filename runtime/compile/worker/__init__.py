"""The compile worker: a process at idle priority that compiles rung graphs and exports them.

client    the decoding process's side: starts the worker, sends requests, reads replies
main      the worker process (``python -m``)
protocol  what the two say to each other
"""
