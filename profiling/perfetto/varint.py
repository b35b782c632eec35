"""Protobuf base-128 varints, the length prefix of every packet in a Perfetto trace."""

from __future__ import annotations


def encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def decode_varint(data: bytes, pos: int = 0) -> tuple[int, int]:
    """(value, position after it); EOFError when the data ends inside the varint."""
    value = shift = 0
    while True:
        if pos >= len(data):
            raise EOFError
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
