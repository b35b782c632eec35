"""Compiling rung graphs. Here: how a rung is built (``rung_builder``: whole or split,
foreground or placed) and where its compiles run (``placements``); in subpackages:

settings  what a compile is told
graph     one graph compiled: a step graph, a weight part, an attention core, an IR's parts
cache     compiled graphs kept across runs: keys, entries, the store, its directories
worker    the compile worker process: its client, its main and what the two say
"""
