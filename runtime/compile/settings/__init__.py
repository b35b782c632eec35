"""What a compile is told.

modes            the choices a run makes among mechanisms, as enums (graph mode, placement, ...)
device_defaults  what a run uses when not told, chosen per device from paired measurement
options          how a graph is compiled: device, precisions, OpenVINO properties, cache
properties       OpenVINO compile properties given by the user (``--ov-config KEY=VALUE``)
property_facts   what an OpenVINO installation says about a device and a set of properties
devices          whether a device can be compiled for here (no meta-device, a plugin, a compile)
"""
