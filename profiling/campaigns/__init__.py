"""Campaigns: a grid of `ab` experiments (cells) run block by block, here or on a Ray cluster.

spec           the campaign file (TOML): kind, axes, arms, pairs; validated whole before anything
               is written; expands to cells, each an `ab KIND` command line
limits         how large a campaign may be (cells, blocks); progress while its cells are checked
arms           a compile campaign's arms: releases by version (openvino==V), interpreters, current
environments   a release's own environment, built once per machine with uv in the user cache
models         a model's identity (what every node must see alike)
fingerprint    the machine a block ran on (CPU, flags that change the plugin's path, memory, ...)
block          one block of one cell on this machine: `ab KIND --pairs 1 --first-block B`
child          the block's `ab` process: stopped with its trials when we stop or die
store          one SQLite file per campaign: spec, cells, blocks, trials; the coordinator's lock
coordinator    run what is not done yet, commit each block as it ends, progress and ETA
local          executor: one block at a time on this machine
ray_executor   executor: one block per Ray task, each task a whole node (optional extra [cluster])
cells          a cell's experiment and trial log rebuilt from the store, as `ab report` reads them
analyses       the campaign analysed once (cells, cross-cell rows, compile walls, pass moves):
               what the report and the page are both made of
report         per cell the files `ab report` writes; across cells one table, forest plots, page
page           the campaign's compare page (`compile-ahead compare STORE`, compare.html)
history        compile campaigns over releases: compile wall per arm, passes that moved
plots          the forest and history PNGs
status         `campaign status`: done/total, failures, ETA
cli            `compile-ahead campaign run|status|report`
sleep_trial    a stand-in trial that only sleeps (the engine's benchmarks and tests)
testbed        a Ray cluster of simulated nodes in a loopback-only network namespace (same)
"""
