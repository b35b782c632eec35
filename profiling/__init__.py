"""Perfetto traces of device decode against CPU compile, compile-phase counters, A/B trials."""
