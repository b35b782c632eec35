"""Upstream baselines on the same model: OpenVINO's NPU LLM pipeline (NPUW) on CPU and the plain-CPU
stateful model."""
