"""A step reads its outputs through graphs/step.StepOutputs: a static graph's output tensors are
set once and written by the plugin, a dynamic graph's are looked up per call; either way a call
returns what the request holds after it, in a record of its own."""

from __future__ import annotations

import pytest
from step_checks import check_outputs_follow_the_request

from compile_ahead.runtime.sources.resolve import resolve_model


@pytest.mark.parametrize("dynamic", [False, True])
def test_a_checkpoint_steps_outputs_follow_the_request(dynamic):
    check_outputs_follow_the_request(resolve_model("tiny"), dynamic)
