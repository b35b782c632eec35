"""What every `ab` experiment is given besides its arms: its design (blocks, warm-up, where
to start), the trial timeout and how it reports. Built once by the commands from their flags."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DesignOptions:
    """The blocks of an experiment and how its trials run and report (the same for every kind)."""

    pairs: int  # measured blocks, each running every arm once
    warmup: int  # unmeasured trials per arm before the blocks
    first_block: int  # the block of the design's order to start at
    timeout_s: float  # per trial (and per arm probe)
    quiet: bool  # no per-trial progress lines
    no_plot: bool  # no PNG of paired differences
    invocation: dict[str, object] | None  # how the command was started (experiment.json)
