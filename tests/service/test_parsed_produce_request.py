"""ParsedProduceRequest (the fast lane's model for bodies orjson parsed) is ProduceRequest
without the per-string Unicode check: the same schema, and on anything orjson parses the same
verdict and the same values. plain_columns (the lane's shortcut for bodies of utf-8 keys and
values) answers only for bodies the model accepts, with the columns the route decodes."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from service.routes.partitions import plain_columns
from service.schemas import ParsedProduceRequest, ProduceRequest


def _normalized_schema(model: type[ProduceRequest]) -> Any:
    text = json.dumps(model.model_json_schema(), sort_keys=True)
    schema = json.loads(text.replace('"ParsedHeader"', '"Header"').replace('"ParsedRecordIn"', '"RecordIn"')
                        .replace("/ParsedHeader", "/Header").replace("/ParsedRecordIn", "/RecordIn"))
    schema.pop("description", None)
    return schema


def test_same_schema() -> None:
    assert _normalized_schema(ParsedProduceRequest) == _normalized_schema(ProduceRequest)


def _verdict(model: type[ProduceRequest], doc: Any) -> Any:
    try:
        return model.model_validate(doc).model_dump()
    except ValidationError as e:
        return [(err["type"], err["loc"]) for err in e.errors()]


def _same(raw: bytes) -> None:
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return  # the lane hands it to FastAPI
    verdict = _verdict(ProduceRequest, doc)
    assert _verdict(ParsedProduceRequest, doc) == verdict, raw
    plain = plain_columns(doc)
    if plain is not None:  # only for a body the model accepts as plain utf-8 keys and values
        assert isinstance(verdict, dict), raw
        assert verdict["encoding"] == "utf-8" and verdict["producer"] is None, raw
        assert all(r.get("timestamp") is None and not r.get("headers") for r in verdict["records"]), raw
        keys = [None if r.get("key") is None else r["key"].encode() for r in verdict["records"]]
        values = [None if r.get("value") is None else r["value"].encode() for r in verdict["records"]]
        assert plain == (keys, values, verdict["compression"]), raw


def test_plain_columns_takes_the_common_body() -> None:
    doc = {"records": [{"key": "a", "value": "\u00e9"}, {"key": None}, {"value": None}, {}], "compression": "lz4"}
    assert plain_columns(doc) == ([b"a", None, None, None], ["\u00e9".encode(), None, None, None], "lz4")
    assert plain_columns({"records": [], "encoding": "utf-8"}) == ([], [], "none")
    for other in ({"records": [{"key": "a", "timestamp": 1}]}, {"records": [{"key": "a", "headers": []}]},
                  {"records": [{"key": "a"}], "encoding": "base64"},
                  {"records": [{"key": "a"}], "producer": {"id": 1, "epoch": 0, "base_sequence": 0}}):
        assert plain_columns(other) is None


BODIES = [
    b'{"records": [{"key": "a", "value": "b"}]}',
    b'{"records": [{"key": null, "value": null, "timestamp": null, "headers": []}]}',
    b'{"records": [{"key": "\\ud83d\\ude00", "value": "\\u00e9", "timestamp": 5,'
    b' "headers": [{"key": "h", "value": null}, {"key": "g"}]}]}',
    b'{"records": [{"key": "a"}], "encoding": "base64", "compression": "zstd"}',
    b'{"records": [{"key": "a"}], "producer": {"id": 1, "epoch": 2, "base_sequence": 3, "transactional": true}}',
    b'{"records": [{"key": "a", "timestamp": "7"}]}',
    b'{"records": [{"key": "a", "timestamp": 7.0}]}',
    b'{"records": [{"key": "a", "timestamp": 7.5}]}',
    b'{"records": [{"key": "a", "timestamp": -2}]}',
    b'{"records": [{"key": "a", "timestamp": 9223372036854775807}, {"key": "b", "timestamp": -1}]}',
    b'{"records": [{"key": 5}]}',
    b'{"records": [{"key": "a", "headers": [{"value": "x"}]}]}',
    b'{"records": [{"key": "a", "headers": [{"key": "k", "value": 1}]}]}',
    b'{"records": [{"key": "a", "extra": 1}]}',
    b'{"records": [{"key": "a"}], "extra": 1}',
    b'{"records": {"key": "a"}}',
    b'{"records": [], "encoding": "latin-1"}',
    b'{"records": [["a", "b"]]}',
    b'{"records": [{"key": "\\ud800"}]}',
    b'{"records": [{"key": "a", "value": "b"}, {"key": null}], "encoding": "utf-8", "compression": "gzip"}',
    b'{"records": [{"key": "a"}], "encoding": null}',
    b'{"records": [{"key": "a"}], "compression": null}',
    b'{"records": [{"key": "a"}], "compression": "LZ4"}',
    b'{"records": [{"key": true}]}',
    b'{"records": [{"value": 1.5}]}',
    b'{"records": null}',
    b'[]',
    b'"records"',
]


@pytest.mark.parametrize("raw", BODIES)
def test_same_verdict(raw: bytes) -> None:
    _same(raw)


_text = st.one_of(st.none(), st.text(max_size=5), st.integers(-3, 3), st.booleans())
_header = st.dictionaries(st.sampled_from(["key", "value", "x"]), _text, max_size=3)
_record = st.dictionaries(
    st.sampled_from(["key", "value", "timestamp", "headers", "x"]),
    st.one_of(_text, st.integers(-(2**64), 2**64), st.lists(_header, max_size=2)), max_size=4)
_body = st.dictionaries(
    st.sampled_from(["records", "encoding", "compression", "producer", "x"]),
    st.one_of(st.lists(_record, max_size=3), st.sampled_from(["utf-8", "base64", "lz4", "none", "zip"]),
              st.fixed_dictionaries({"id": st.integers(-1, 2), "epoch": st.integers(0, 2),
                                     "base_sequence": st.integers(0, 2)}), st.none()), max_size=4)


@settings(max_examples=300, deadline=None)
@given(_body)
def test_same_verdict_on_generated_bodies(doc: dict[str, Any]) -> None:
    _same(json.dumps(doc).encode())
