"""Compiling rung graphs: the compiler, the compile cache, split weight parts and where a
compile runs (in-process or a worker); what a compile is told is in ``settings``."""
