"""A command's output files.

checks  output paths checked before any work, never replaced by a failed run
inputs  an output never lands on an input (compared by device and inode, not by spelling)
atomic  files written so a crash never leaves a half-written file in place of a good one
dirs    output directories built aside in a staging directory and published whole
paths   names and kinds of output paths (what is at a path, name limits, temporary names)
modes   modes and owners of published outputs
kind    what kind of file a mode is, in words for a one-line message
format_version  the results format's version every results file carries
"""
