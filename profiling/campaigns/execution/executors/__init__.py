"""Where a campaign's blocks run.

local        one block at a time on this machine, in the coordinator's process
ray_cluster  one Ray task per block, each taking a whole node (optional extra [cluster])
"""
