"""What a run uses when not told, chosen per device from paired measurement.

Graph mode (``--graph``) and compile placement (``--compile-placement``) are mechanisms the
runner offers; which one pays depends on the device, so each default names the measurement
behind it. A device nobody has measured gets the plain choice (whole graphs, in-process).
"""

from __future__ import annotations

GRAPH_MODES = ("whole", "split")
PLACEMENTS = ("in-process", "worker")

# CPU: whole. Split compiles a successor rung in ~0.06 s instead of seconds and holds one
# weight copy, but each split step makes 2N+1 infer calls. Paired on a qwen2.5-0.5b-shaped
# checkpoint (`ab schedule`, i2 whole vs split, 1K->2K, 1920 tokens, 3 AB/BA pairs): split
# held 0.63x the peak RSS but decoded ~18% slower and its foreground compile (every weight
# part) was 1.2x; on the 1K..8K protocol the per-token cost outweighs the compile it saves.
MEASURED_GRAPH = {"CPU": "whole"}

# CPU: in-process. A worker process compiles at idle priority and hands back an exported blob,
# but the CPU plugin repacks the weights again when the blob is imported: on qwen2.5-0.5b
# shapes (benchmarks/compile_placement.py) the import in the decoding process cost 1.3-2.0x
# the in-process compile, decode lost more in total, and the successor was ready 2-5x later.
# The worker is the mechanism for devices where importing is cheap next to compiling, and for
# isolating a compiler that crashes or hangs.
MEASURED_PLACEMENT = {"CPU": "in-process"}


def default_graph(device: str) -> str:
    return MEASURED_GRAPH.get(device.upper(), "whole")


def default_placement(device: str) -> str:
    return MEASURED_PLACEMENT.get(device.upper(), "in-process")
