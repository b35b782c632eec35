"""Campaigns: a grid of `ab` experiments (cells) run block by block, here or on a Ray cluster.

spec           the campaign file (TOML): kind, axes, arms, pairs; validated whole before anything
               is written; expands to cells, each an `ab KIND` command line
arms           a campaign's arms: installations by version (openvino==V), interpreters, current
environments   an OpenVINO release's own environment, built once with uv in the user cache
models         a model's identity (what every node must see alike)
fingerprint    the machine a block ran on (CPU, flags that change the plugin's path, memory, ...)
block          one block of one cell on this machine: `ab KIND --pairs 1 --first-block B`
child          the block's `ab` process: killed with its trials when we stop or die
store          one SQLite file per campaign: spec, cells, blocks, trials; the coordinator's lock
coordinator    run what is not done yet, commit each block as it ends, progress and ETA
local          executor: one block at a time on this machine
ray_executor   executor: one block per Ray task, each task a whole node (optional extra [cluster])
cells          a cell's experiment and trial log rebuilt from the store, as `ab report` reads them
report         per cell the files `ab report` writes; across cells one table and forest plots
history        compile campaigns over releases: compile wall per release, passes that moved
cli            `compile-ahead campaign run|status|report`
loopback       run a command in a network namespace with only loopback (Ray test clusters)
"""
