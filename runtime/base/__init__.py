"""The bottom layer of the runtime: OpenVINO helpers, precisions, time and memory measures, the user
cache directory. Imports nothing else of the runtime."""
