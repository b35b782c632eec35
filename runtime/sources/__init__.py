"""Model sources: what `--model` names, resolved to a config, weights and the way its rung
graphs are
made."""
