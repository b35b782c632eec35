"""What a model is, before any graph: its architecture (config.json), presets, weight stores,
synthetic
checkpoints, the IR reader, the KV memory."""
