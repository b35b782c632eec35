"""The serving engine: continuous batching on static [B, C] buckets (a batch size times a
capacity of the ladder), each compiled just ahead of need; its face to an HTTP endpoint is
``api``."""
