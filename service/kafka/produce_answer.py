"""Produce answers of the common case (every partition appended) written from a layout kafka.protocol encoded once.

A Produce answer in which every partition answers NONE differs from the next answer of the same
shape (API version, topics and partitions in the same order) only in each partition's base
offset, log append time and log start offset. Building and encoding the message object for every
request cost the listener more than a small produce batch's append, so the first answer of a
shape is encoded by kafka.protocol with marker values in those int64 fields; the places where
the markers landed are remembered, checked once against a second encoding by the library, and
later answers of that shape are the remembered bytes with their own values written in. The
library stays the only description of the message: nothing here knows the field order or sizes.
A field the version does not carry (log start offset before v5) simply has no place.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any

_Q = struct.Struct(">q")
#: marker values for the int64 fields (a byte pattern no count, length or code of an answer this size makes)
_MARK = 0x5A17_C0DE_0000_0000
#: answer shapes remembered (a node with more distinct topic/partition sets per request starts over)
MAX_LAYOUTS = 4096

Shape = tuple[int, tuple[tuple[str, tuple[int, ...]], ...]]
#: (topic name, [(partition index, base offset, log append time, log start offset), ...]) per topic, in order
Answered = Sequence[tuple[str, Sequence[tuple[int, int, int, int]]]]
Encoder = Callable[[int, Answered], bytes]


class EncodedResponse:
    """An answer already encoded at its version: the listener frames and writes ``body`` as it is."""

    __slots__ = ("body",)

    def __init__(self, body: bytes | bytearray) -> None:
        self.body = body

    def encode(self, version: int | None = None) -> bytes | bytearray:
        return self.body


class _Layout:
    __slots__ = ("template", "places")

    def __init__(self, template: bytes, places: list[int | None]) -> None:
        self.template = template
        #: per partition in answer order, the byte positions of its three int64 fields (None: not in this version)
        self.places = places


class AnswerLayouts:
    """The remembered layouts of one message type; ``encode(version, answered)`` builds the message with the library."""

    def __init__(self, encode: Encoder) -> None:
        self._encode = encode
        self._layouts: dict[Shape, _Layout | None] = {}

    def answer(self, version: int, answered: Answered) -> EncodedResponse | None:
        """The encoded answer, or None where no layout could be made (the caller then encodes it itself)."""
        shape = (version, tuple((name, tuple(p[0] for p in parts)) for name, parts in answered))
        try:
            layout = self._layouts[shape]
        except KeyError:
            if len(self._layouts) >= MAX_LAYOUTS:
                self._layouts.clear()
            layout = self._layouts[shape] = self._learn(version, answered)
        if layout is None:
            return None
        values = [v for _name, parts in answered for _index, *offsets in parts for v in offsets]
        return EncodedResponse(_fill(layout, values))

    def _learn(self, version: int, answered: Answered) -> _Layout | None:
        n = sum(len(parts) for _n, parts in answered)
        marked = self._encode(version, _with_values(answered, [_MARK + k for k in range(3 * n)]))
        places: list[int | None] = []
        for k in range(3 * n):
            mark = _Q.pack(_MARK + k)
            at = marked.find(mark)
            if at >= 0 and marked.find(mark, at + 1) >= 0:
                return None  # ambiguous: never expected, but then no layout
            places.append(at if at >= 0 else None)
        layout = _Layout(bytes(marked), places)
        # check the layout once: other values written in must give exactly the library's own encoding
        probe = [(-1) ** k * (k * 7_919 + 12_345) for k in range(3 * n)]
        expected = self._encode(version, _with_values(answered, probe))
        return layout if bytes(_fill(layout, probe)) == bytes(expected) else None


def _fill(layout: _Layout, values: list[int]) -> bytearray:
    """The layout's template with ``values`` written at its places (one per int64 field, in order)."""
    body = bytearray(layout.template)
    for at, value in zip(layout.places, values, strict=True):
        if at is not None:
            _Q.pack_into(body, at, value)
    return body


def _with_values(answered: Answered, values: list[int]) -> Answered:
    it = iter(values)
    return [(name, [(p[0], next(it), next(it), next(it)) for p in parts]) for name, parts in answered]


def _encode_produce(version: int, answered: Answered) -> bytes:
    from kafka.protocol.producer import ProduceResponse

    part = ProduceResponse.TopicProduceResponse.PartitionProduceResponse
    fields: dict[str, Any] = {"record_errors": [], "error_message": None} if version >= 8 else {}
    topics = [ProduceResponse.TopicProduceResponse(
        name=name, version=version,
        partition_responses=[part(index=i, error_code=0, base_offset=b, log_append_time_ms=t, log_start_offset=s,
                                  version=version, **fields) for i, b, t, s in parts])
        for name, parts in answered]
    return bytes(ProduceResponse(responses=topics, throttle_time_ms=0, version=version).encode(version=version))


#: Produce's answers (service/kafka/produce.py)
PRODUCE = AnswerLayouts(_encode_produce)
