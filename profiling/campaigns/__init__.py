"""Campaigns: a grid of `ab` experiments (cells) run block by block, here or on a Ray cluster.

spec           the campaign file (TOML): kind, axes, arms, pairs; validated whole before anything
               is written; expands to cells, each an `ab KIND` command line
arms           a compile campaign's arms: releases by version (openvino==V), interpreters, current
environments   a release's own environment, built once per machine with uv in the user cache
models         a model's identity (what every node must see alike)
fingerprint    the machine a block ran on (CPU, flags that change the plugin's path, memory, ...)
block          one block of one cell on this machine: `ab KIND --pairs 1 --first-block B`
child          the block's `ab` process: stopped with its trials when we stop or die
store          one SQLite file per campaign: spec, cells, blocks, trials; the coordinator's lock
coordinator    run what is not done yet, commit each block as it ends, progress and ETA
cells          a cell's experiment and trial log rebuilt from the store, as `ab report` reads them
status         `campaign status`: done/total, failures, ETA
executors      where blocks run: here, one at a time, or one per Ray task on a cluster
results        the campaign analysed once, its report files, plots and compare page
limits         how large a campaign may be, and the progress line while one is checked
"""
