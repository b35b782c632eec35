"""What a campaign keeps.

store       one SQLite file per campaign: spec, identity, cells, blocks, trials
store_lock  one coordinator per store file: an flock on the store itself
cells       a cell's experiment and trial log rebuilt from the store, as `ab report` reads them
"""
