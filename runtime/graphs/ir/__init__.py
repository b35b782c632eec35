"""Graphs cut from an OpenVINO model (an IR read from disk, or the stateful model built from
weights): a rung cut from it, its attention swapped, split at its attentions, the paged prefill
form, and the step that drives them once compiled."""
