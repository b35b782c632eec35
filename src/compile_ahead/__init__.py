"""compile-ahead: compile the next KV capacity while the device decodes.

Subpackages: ``compile_ahead.runtime`` (models, graphs, ladder schedules) and
``compile_ahead.profiling`` (traces, counters, A/B trials). Importing this package must stay
cheap and must not import openvino: the compile-phase collector has to be announced to
OpenVINO before its library loads.
"""

__version__ = "0.1.0"
