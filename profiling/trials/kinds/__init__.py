"""Every experiment kind by the name its experiment.json gives it: the table the commands, the
campaigns and the compare page hand to the trials engine, which names no kind itself."""

from collections.abc import Mapping
from types import MappingProxyType

from compile_ahead.profiling.trials.compile_kind.kind import COMPILE
from compile_ahead.profiling.trials.experiment import Kind
from compile_ahead.profiling.trials.schedule_kind.kind import SCHEDULE
from compile_ahead.profiling.trials.serve_kind.kind import SERVE

KINDS: Mapping[str, Kind] = MappingProxyType(
    {"compile": COMPILE, "schedule": SCHEDULE, "serve": SERVE}
)
