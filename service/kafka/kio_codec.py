"""The Kafka API versions Kafka 4.0 removed (kafka-python's schemas lack them), read and written through kio's entities.

kio 0.5 is generated from Kafka 3.x's JSON message schemas, which still hold the versions KIP-896
removed in Kafka 4.0 (OffsetCommit v0-v1, OffsetFetch v0, OffsetForLeaderEpoch v0-v1,
CreateTopics v0-v1, DeleteTopics v0, DescribeConfigs v0). A handler registers such a range with
``@kafka_api(..., older=KioVersions(lo, hi))``. At those versions the listener reads the request
with kio's reader and hands the handler the same kafka-python request message it gets at every
other version (same field names; a field the old version lacks reads as the schema's default), and
writes the handler's kafka-python answer as kio's response entity of that version (fields the old
version lacks are left out). Handlers never see kio.

The one renaming is kio's: a ``...Ms`` duration is a ``timedelta`` named without the suffix
(``timeout``, ``throttle_time``). Every mapping is checked when the handler registers: a request
field of an old version that kafka-python's schema lacks would be dropped, so it refuses to
register (none of these versions has one: Kafka kept their fields, e.g. OffsetCommit v1's
``commit_timestamp``, in its 4.0 schemas), and a response field it lacks must have kio's default.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import types
import typing
from dataclasses import dataclass, field
from typing import Any

#: kio's integer types by Kafka's type name (filled by _kio() with kio itself)
_INTS: dict[str, Any] = dict.fromkeys(("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"))


def _kio() -> types.SimpleNamespace:
    """kio's modules, imported on first use: they take a noticeable part of a node's startup (kio's static types pull
    in hypothesis where it is installed), and only requests at these old versions need them."""
    global _KIO
    if _KIO is None:
        from kio.index import load_request_schema, load_response_schema
        from kio.schema.errors import ErrorCode
        from kio.serial import entity_reader, entity_writer
        from kio.static import primitive

        _INTS.update({"int8": primitive.i8, "int16": primitive.i16, "int32": primitive.i32, "int64": primitive.i64,
                      "uint8": primitive.u8, "uint16": primitive.u16, "uint32": primitive.u32,
                      "uint64": primitive.u64})
        _KIO = types.SimpleNamespace(load_request_schema=load_request_schema, ErrorCode=ErrorCode,
                                     load_response_schema=load_response_schema, entity_reader=entity_reader,
                                     entity_writer=entity_writer)
    return _KIO


_KIO: types.SimpleNamespace | None = None
_DURATIONS = frozenset({"timedelta_i32", "timedelta_i64"})
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


@dataclass(frozen=True)
class _Field:
    """One field of a kio entity and its counterpart in kafka-python's schema (``kp_name`` None: kio's default)."""

    name: str
    kp_name: str | None
    kafka_type: str | None      # primitives only
    array: bool
    nested: _Plan | None        # entities only
    kp_class: Any = None        # kafka-python's data class of a nested entity


@dataclass(frozen=True)
class _Plan:
    """How one kio entity class maps onto one kafka-python struct."""

    kio_cls: type
    fields: tuple[_Field, ...]


def _shape(hint: Any) -> tuple[Any, bool]:
    """(the element type, is it an array) of a kio field's type hint, ``None`` stripped."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    if typing.get_origin(hint) is tuple:
        return typing.get_args(hint)[0], True
    return hint, False


def _kp_name(name: str, kafka_type: str | None, kp_fields: dict[str, Any]) -> str | None:
    if name in kp_fields:
        return name
    if kafka_type in _DURATIONS or kafka_type == "datetime_i64":
        return name + "_ms" if name + "_ms" in kp_fields else None
    return None


def _plan(kio_cls: type, kp_struct: Any, request: bool) -> _Plan:
    """Map ``kio_cls``'s fields, nested entities too, onto ``kp_struct``'s (raises where one has no counterpart)."""
    hints = typing.get_type_hints(kio_cls)
    kp_fields = kp_struct.fields
    out = []
    for f in dataclasses.fields(kio_cls):
        inner, array = _shape(hints[f.name])
        kafka_type = None if dataclasses.is_dataclass(inner) else f.metadata.get("kafka_type")
        kp_name = _kp_name(f.name, kafka_type, kp_fields)
        where = f"{kio_cls.__module__}.{kio_cls.__qualname__}.{f.name}"
        if kp_name is None:
            if request:
                raise TypeError(f"{where} has no field in kafka-python's schema: the handler would not see it")
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise TypeError(f"{where} has no field in kafka-python's schema and no default")
            out.append(_Field(f.name, None, kafka_type, array, None))
            continue
        kpf = kp_fields[kp_name]
        if kafka_type is None:
            nested = _plan(inner, kpf, request)
            out.append(_Field(f.name, kp_name, None, array, nested, kpf.data_class))
        else:
            out.append(_Field(f.name, kp_name, kafka_type, array, None))
    return _Plan(kio_cls, tuple(out))


def _from_kio(kafka_type: str | None, v: Any) -> Any:
    """A kio primitive value as the plain Python value kafka-python's messages hold."""
    if v is None:
        return None
    if kafka_type in _DURATIONS:
        return round(v.total_seconds() * 1000)
    if kafka_type == "datetime_i64":
        return round(v.timestamp() * 1000)
    if kafka_type == "error_code" or kafka_type in _INTS:
        return int(v)
    if kafka_type == "string":
        return str(v)
    if kafka_type == "bool":
        return bool(v)
    return v


def _to_kio(kafka_type: str | None, v: Any) -> Any:
    """A kafka-python field value as kio's type for ``kafka_type``."""
    if v is None:
        return None
    if kafka_type == "error_code":
        return _kio().ErrorCode(v)
    if kafka_type in _DURATIONS:
        return datetime.timedelta(milliseconds=v)
    if kafka_type == "datetime_i64":
        return _EPOCH + datetime.timedelta(milliseconds=v)
    ctor = _INTS.get(kafka_type or "")
    if ctor is not None:
        return ctor(v)
    if kafka_type == "bool":
        return bool(v)
    if kafka_type in ("bytes", "records"):
        return bytes(v)
    return v


def _to_kp_fields(plan: _Plan, entity: Any) -> dict[str, Any]:
    vals: dict[str, Any] = {}
    for f in plan.fields:
        if f.kp_name is None:
            continue
        v = getattr(entity, f.name)
        if v is None:
            vals[f.kp_name] = None
        elif f.nested is not None:
            vals[f.kp_name] = ([f.kp_class(**_to_kp_fields(f.nested, e)) for e in v] if f.array
                               else f.kp_class(**_to_kp_fields(f.nested, v)))
        else:
            vals[f.kp_name] = [_from_kio(f.kafka_type, x) for x in v] if f.array else _from_kio(f.kafka_type, v)
    return vals


def _to_entity(plan: _Plan, obj: Any) -> Any:
    vals: dict[str, Any] = {}
    for f in plan.fields:
        if f.kp_name is None:
            continue  # the entity's default
        v = getattr(obj, f.kp_name)
        if v is None:
            vals[f.name] = None
        elif f.nested is not None:
            vals[f.name] = tuple(_to_entity(f.nested, e) for e in v) if f.array else _to_entity(f.nested, v)
        else:
            vals[f.name] = tuple(_to_kio(f.kafka_type, x) for x in v) if f.array else _to_kio(f.kafka_type, v)
    return plan.kio_cls(**vals)


@dataclass
class KioVersions:
    """Versions ``min_version..max_version`` of one API, below kafka-python's, served through kio's entities."""

    min_version: int
    max_version: int
    _requests: dict[int, tuple[_Plan, Any, Any]] = field(default_factory=dict, repr=False)
    _responses: dict[int, tuple[_Plan, Any]] = field(default_factory=dict, repr=False)

    _bound: tuple[int, Any, Any] | None = field(default=None, repr=False)

    def bind(self, api_key: int, request_cls: Any, response_cls: Any) -> None:
        """The API and kafka-python's classes these versions are served as (mapped on first use: :meth:`load`)."""
        self._bound = (api_key, request_cls, response_cls)

    def load(self) -> None:
        """Map every version's kio entities onto kafka-python's classes (raises if a field has no counterpart); done
        once, by the first request at one of these versions (tests call it for every API at startup's place)."""
        if self._requests:
            return
        if self._bound is None:
            raise RuntimeError("KioVersions.load before bind")
        kio = _kio()
        api_key, request_cls, response_cls = self._bound
        requests, responses = {}, {}
        for v in range(self.min_version, self.max_version + 1):
            kio_req, kio_resp = kio.load_request_schema(api_key, v), kio.load_response_schema(api_key, v)
            if kio_req.__flexible__ or request_cls.flexible_version_q(v):
                raise TypeError(f"API {api_key} v{v}: a flexible version needs kafka-python's request header")
            requests[v] = (_plan(kio_req, request_cls._struct, True), kio.entity_reader(kio_req), request_cls)
            responses[v] = (_plan(kio_resp, response_cls._struct, False), kio.entity_writer(kio_resp))
        self._responses.update(responses)
        self._requests.update(requests)  # last: a non-empty _requests means loaded

    def decode(self, body: bytes | memoryview, version: int) -> Any:
        """The request body (after the header) at ``version`` as the kafka-python request message."""
        self.load()
        plan, read, request_cls = self._requests[version]
        entity, _size = read(body, 0)
        return request_cls(**_to_kp_fields(plan, entity))

    def encode(self, response: Any, version: int) -> bytes:
        """The handler's kafka-python response message as the body of kio's response at ``version``."""
        self.load()
        plan, write = self._responses[version]
        buf = io.BytesIO()
        write(buf, _to_entity(plan, response))
        return buf.getvalue()
