"""Compiling rung graphs: options, the compiler, the compile cache, split weight parts and where a
compile runs (in-process or a worker)."""
