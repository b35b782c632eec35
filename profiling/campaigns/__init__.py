"""Campaigns: a grid of `ab` experiments (cells) run block by block, here or on a Ray cluster.

spec           the campaign file (TOML): kind, axes, arms, pairs; validated whole before anything
               is written; expands to cells, each an `ab KIND` command line
validation     what a campaign file must pass first: its arms (releases by version, interpreters,
               current), their identity, the campaign's size, its text and tables
environments   a release's own environment, built once per machine with uv in the user cache
models         a model's identity (what every node must see alike)
fingerprint    the machine a block ran on (CPU, flags that change the plugin's path, memory, ...)
block          one block of one cell on this machine: `ab KIND --pairs 1 --first-block B`
child          the block's `ab` process: stopped with its trials when we stop or die
store          one SQLite file per campaign: spec, identity, cells, blocks, trials
coordinator    run what is not done yet, commit each block as it ends, progress and ETA
cells          a cell's experiment and trial log rebuilt from the store, as `ab report` reads them
status         `campaign status`: done/total, failures, ETA
executors      where blocks run: here, one at a time, or one per Ray task on a cluster
results        the campaign analysed once, its report files, plots and compare page
block_dirs     the private folders blocks run in, checked as the compile cache's are
store_lock     one coordinator per store file: an flock on the store itself
"""
