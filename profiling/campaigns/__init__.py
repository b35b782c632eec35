"""Campaigns: a grid of `ab` experiments (cells) run block by block, here or on a Ray cluster.

definition   what a campaign is: the file (TOML) and its cells (spec), what it must pass before
             anything is written (validation), a release's own environment (environments)
persistence  what a campaign keeps: one SQLite store per campaign (store), one coordinator per
             store (store_lock), a cell's experiment rebuilt from the store (cells)
execution    how it runs: the coordinator, one block on this machine (block, its private
             folders block_dirs, its `ab` process child), what every node must see alike
             (models), the machine a block ran on (fingerprint), `campaign status`, and where
             blocks run (executors)
results      the campaign analysed once, its report files, plots and compare page
"""
