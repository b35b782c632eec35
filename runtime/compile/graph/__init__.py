"""One graph compiled, through the compile cache: a whole step graph (``step_compile``), split
weight parts and attention cores (``split_step``), an IR's weight parts (``ir_split_parts``),
and what a compile gives back (``result``)."""
