"""Produce answers written from a remembered layout are byte for byte kafka.protocol's own encoding of the same answer."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.producer import ProduceResponse

from service.kafka.produce_answer import AnswerLayouts, _encode_produce

_int64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
_parts = st.lists(st.tuples(st.integers(0, 1 << 20), _int64, _int64, _int64), min_size=1, max_size=5,
                  unique_by=lambda p: p[0])
_answered = st.lists(st.tuples(st.text(min_size=1, max_size=40), _parts), min_size=1, max_size=4,
                     unique_by=lambda t: t[0])


@settings(max_examples=150, deadline=None)
@given(version=st.integers(3, 9), answered=_answered, again=st.lists(_int64, min_size=60, max_size=60))
def test_a_layouts_answer_is_the_librarys_encoding_for_every_version_and_shape(version, answered, again) -> None:  # type: ignore[no-untyped-def]
    layouts = AnswerLayouts(_encode_produce)
    first = layouts.answer(version, answered)
    assert first is not None
    assert bytes(first.encode(version)) == _encode_produce(version, answered)
    # the same shape with other values: the remembered layout, not a new encoding
    it = iter(again)
    other = [(name, [(p[0], next(it), next(it), next(it)) for p in parts]) for name, parts in answered]
    second = layouts.answer(version, other)
    assert second is not None and len(layouts._layouts) == 1
    body = bytes(second.encode(version))
    assert body == _encode_produce(version, other)
    decoded = ProduceResponse.decode(body, version=version)
    got = [(t.name, [(p.index, p.error_code, p.base_offset) for p in t.partition_responses]) for t in decoded.responses]
    assert got == [(name, [(p[0], 0, p[1]) for p in parts]) for name, parts in other]


def test_a_shape_whose_layout_does_not_check_out_is_encoded_by_the_caller() -> None:
    calls = []

    def unstable(version, answered):  # type: ignore[no-untyped-def]
        calls.append(1)
        return _encode_produce(version, answered) + bytes([len(calls)])  # never the same twice: no layout

    layouts = AnswerLayouts(unstable)
    assert layouts.answer(9, [("t", [(0, 5, -1, 0)])]) is None
    assert layouts.answer(9, [("t", [(0, 6, -1, 0)])]) is None
    assert len(calls) == 2  # learnt (and refused) once per shape, not per answer
