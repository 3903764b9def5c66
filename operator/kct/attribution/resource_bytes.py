"""Add resource attributes to an OTLP ExportMetricsServiceRequest without decoding it.

The receiver stores the sender's bytes untouched whenever it can (no decode, no re-encode: most of a push's
CPU). Attribution changes one thing: the `resource.attributes` of each ResourceMetrics. So only the two
outer levels are walked (ExportMetricsServiceRequest.resource_metrics -> ResourceMetrics.resource ->
Resource.attributes); scopes, metrics and points are copied as bytes. The output is canonical OTLP: one
Resource per ResourceMetrics (created when absent), the added KeyValues after the sender's, and a sender's
attribute with an added key removed (attribute keys are unique in OTLP). Unknown fields are kept.

Input must be a parsable message (the pipeline has checked it); a truncated one raises ValueError.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

__all__ = ["encode_attributes", "with_resource_attributes"]

_LEN = 2


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _read_varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end:
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _fields(data: bytes, start: int, end: int) -> list[tuple[int, int, int, int, int]]:
    """(field number, wire type, field start incl. tag, payload start, field end) of each field."""
    out = []
    pos = start
    while pos < end:
        field_start = pos
        tag, pos = _read_varint(data, pos, end)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            _, pos = _read_varint(data, pos, end)
            payload = pos
        elif wire == 1:
            payload, pos = pos, pos + 8
        elif wire == _LEN:
            length, payload = _read_varint(data, pos, end)
            pos = payload + length
        elif wire == 5:
            payload, pos = pos, pos + 4
        else:
            raise ValueError(f"wire type {wire} is not supported")
        if pos > end:
            raise ValueError("truncated field")
        out.append((number, wire, field_start, payload, pos))
    return out


def _len_field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | _LEN) + _varint(len(payload)) + payload


def encode_attributes(attributes: Sequence[tuple[str, str]]) -> bytes:
    """KeyValue entries (Resource field 1) with string values."""
    return b"".join(
        _len_field(1, _len_field(1, key.encode()) + _len_field(2, _len_field(1, value.encode())))
        for key, value in attributes
    )


def _key_of(data: bytes, start: int, end: int) -> bytes | None:
    for number, wire, _, payload, field_end in _fields(data, start, end):
        if number == 1 and wire == _LEN:
            return data[payload:field_end]
    return None


def _resource(data: bytes, start: int, end: int, keys: frozenset[bytes], added: bytes) -> bytes:
    resource = data[start:end]
    if not any(key in resource for key in keys):
        return resource + added  # none of our keys is there (the usual case): no need to walk the KeyValues
    out = bytearray()
    for number, wire, field_start, payload, field_end in _fields(data, start, end):
        if number == 1 and wire == _LEN and _key_of(data, payload, field_end) in keys:
            continue
        out += data[field_start:field_end]
    return bytes(out + added)


def _resource_metrics(data: bytes, start: int, end: int, keys: frozenset[bytes], added: bytes) -> bytes:
    out = bytearray()
    seen_resource = False
    for number, wire, field_start, payload, field_end in _fields(data, start, end):
        if number == 1 and wire == _LEN:
            # Several Resource fields merge when parsed: the sender's keys go from each, ours into the first.
            out += _len_field(1, _resource(data, payload, field_end, keys, b"" if seen_resource else added))
            seen_resource = True
        else:
            out += data[field_start:field_end]
    if not seen_resource:
        return _len_field(1, added) + bytes(out)
    return bytes(out)


def _one_resource(data: bytes, keys: frozenset[bytes], added: bytes) -> bytes | None:
    """What a client's push nearly always is, done with one copy: a single ResourceMetrics starting with its
    Resource, none of whose attributes has one of our keys. None when `data` is laid out otherwise."""
    end = len(data)
    if end < 4 or data[0] != 0x0A:
        return None
    rm_length, rm_start = _read_varint(data, 1, end)
    if rm_start + rm_length != end or rm_start >= end or data[rm_start] != 0x0A:
        return None
    resource_length, resource_start = _read_varint(data, rm_start + 1, end)
    resource_end = resource_start + resource_length
    if resource_end > end:
        raise ValueError("truncated field")
    resource = data[resource_start:resource_end]
    if any(key in resource for key in keys):
        return None
    new_resource_length = resource_length + len(added)
    resource_tag = b"\x0a" + _varint(new_resource_length)
    new_rm_length = len(resource_tag) + new_resource_length + (end - resource_end)
    return b"".join(
        (b"\x0a", _varint(new_rm_length), resource_tag, resource, added, memoryview(data)[resource_end:])
    )


@lru_cache(maxsize=4096)
def _prepared(attributes: tuple[tuple[str, str], ...]) -> tuple[frozenset[bytes], bytes]:
    """The keys and encoded KeyValues of one pod's attributes: the same few sets are added push after push."""
    return frozenset(key.encode() for key, _ in attributes), encode_attributes(attributes)


def with_resource_attributes(data: bytes, attributes: Sequence[tuple[str, str]]) -> bytes:
    """`data` with `attributes` (string values) set on the resource of every ResourceMetrics."""
    if not attributes:
        return data
    keys, added = _prepared(tuple(attributes))
    fast = _one_resource(data, keys, added)
    if fast is not None:
        return fast
    out = bytearray()
    for number, wire, field_start, payload, field_end in _fields(data, 0, len(data)):
        if number == 1 and wire == _LEN:
            out += _len_field(1, _resource_metrics(data, payload, field_end, keys, added))
        else:
            out += data[field_start:field_end]
    return bytes(out)
