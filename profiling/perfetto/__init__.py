"""The Perfetto trace format and its viewer.

writer    streamed Perfetto traces: tracks, slices, counters, flows, written as they happen
validate  structural checks of a trace, stricter than the trace processor
varint    protobuf base-128 varints, the length prefix of every packet
ui        open a trace in the Perfetto UI (`trace open`): served on 127.0.0.1, or the offline UI
"""
