"""How a campaign runs.

coordinator  run what is not done yet, commit each block as it ends, progress and ETA
block        one block of one cell on this machine: `ab KIND --pairs 1 --first-block B`
block_dirs   the private folders blocks run in, checked as the compile cache's are
child        the block's `ab` process: stopped with its trials when we stop or die
models       a model's identity (what every node must see alike)
fingerprint  the machine a block ran on (CPU, flags that change the plugin's path, memory, ...)
status       `campaign status`: done/total, failures, ETA
executors    where blocks run: here, one at a time, or one per Ray task on a cluster
"""
