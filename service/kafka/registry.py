"""The Kafka API handler contract: ``@kafka_api`` registers a coroutine per API key, ``RequestContext`` is what it gets.

A handler module declares, for one Kafka API, the request class from ``kafka.protocol`` (generated
from Kafka's JSON message schemas) and the version range it implements::

    @kafka_api(ProduceRequest, min_version=3, max_version=9)
    async def handle_produce(ctx: RequestContext, request) -> ProduceResponse | None: ...

The listener decodes the request at the version the client sent, calls the handler, and encodes
what it returns at the same version (``ctx.response(...)`` builds the matching response class).
A handler returns:

- a response message: written back in request order;
- ``None``: no response at all (Produce with acks=0);
- an awaitable of either (e.g. ``ctx.later(coro)``): the listener reads and dispatches the
  connection's next request at once and writes this answer, in order, once it resolves. Handlers
  are *called* one at a time per connection, in request order (as Kafka's broker processes a
  connection's requests). A ``pipelined=True`` API (Produce) queues its blocking work with
  ``ctx.in_order`` (the connection's lane, service/kafka/lane.py) and returns at once, so many
  pipelined requests share one worker job in their order; every other API's handler is called
  only once the lane has drained.

Handlers never block the event loop: disk, SQL and object-store work goes through
``await ctx.run(fn, *args)`` (the listener's worker threads). Fetch's long poll is
``await ctx.wait_for_append(tps, timeout_s)``.

Versions older than kafka-python's schemas (Kafka 4.0 removed them) are registered with
``older=KioVersions(lo, hi)`` (:mod:`service.kafka.kio_codec`): the same handler serves them, the
listener reading and writing those versions through kio's entities (``ApiSpec.older``).

ApiVersions answers exactly the registered ranges (:func:`supported_versions`). An API that must
answer before SASL authentication (ApiVersions, SaslHandshake, SaslAuthenticate) registers with
``before_auth=True``; every other one is refused on a connection that has not authenticated when
the node requires credentials.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from log.types import TopicPartition

if TYPE_CHECKING:
    from service.node import Node

Handler = Callable[["RequestContext", Any], Awaitable[Any]]


@dataclass(frozen=True)
class ApiSpec:
    """One registered Kafka API: its key, message classes, implemented versions and handler.

    ``min_version..max_version`` is everything served; versions below ``native_min`` go through the
    ``older`` codec (kio) instead of ``request_cls``/``response_cls``'s own decode and encode.
    """

    api_key: int
    name: str
    request_cls: Any
    response_cls: Any
    min_version: int
    max_version: int
    handler: Handler
    before_auth: bool = False
    older: Any = None
    native_min: int = 0
    #: the handler only queues its blocking work on the connection's lane (``ctx.in_order``) and returns an
    #: awaitable: the listener reads the next request at once (service/kafka/lane.py)
    pipelined: bool = False

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


_REGISTRY: dict[int, ApiSpec] = {}


def response_class_for(request_cls: Any) -> Any:
    """The ``...Response`` class beside a ``...Request`` class of ``kafka.protocol``."""
    name = request_cls.__name__
    if not name.endswith("Request"):
        raise TypeError(f"{name} is not a kafka.protocol request class")
    return getattr(sys.modules[request_cls.__module__], name[: -len("Request")] + "Response")


def kafka_api(request_cls: Any, *, min_version: int, max_version: int, before_auth: bool = False,
              older: Any = None, pipelined: bool = False) -> Callable[[Handler], Handler]:
    """Register the decorated coroutine as the handler of ``request_cls``'s API key, versions min..max.

    ``older`` (a :class:`service.kafka.kio_codec.KioVersions`) adds the versions just below ``min_version``
    that kafka-python's schemas no longer describe.
    """
    if not 0 <= min_version <= max_version <= request_cls.max_version:
        raise ValueError(f"{request_cls.__name__}: versions {min_version}..{max_version} are not within "
                         f"the schema's 0..{request_cls.max_version}")
    if older is not None:
        if not 0 <= older.min_version <= older.max_version == min_version - 1:
            raise ValueError(f"{request_cls.__name__}: older versions {older.min_version}..{older.max_version} "
                             f"must end just below {min_version}")
        older.bind(int(request_cls.API_KEY), request_cls, response_class_for(request_cls))

    def register(fn: Handler) -> Handler:
        key = int(request_cls.API_KEY)
        old = _REGISTRY.get(key)
        if old is not None and old.handler is not fn and old.handler.__qualname__ != fn.__qualname__:
            raise ValueError(f"API key {key} ({request_cls.__name__}) already has a handler: {old.handler!r}")
        lowest = min_version if older is None else older.min_version
        _REGISTRY[key] = ApiSpec(key, request_cls.__name__[: -len("Request")], request_cls,
                                 response_class_for(request_cls), lowest, max_version, fn, before_auth,
                                 older, min_version, pipelined)
        return fn

    return register


def lookup(api_key: int) -> ApiSpec | None:
    return _REGISTRY.get(api_key)


def registered() -> list[ApiSpec]:
    """Every registered API, by key."""
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


def supported_versions() -> list[tuple[int, int, int]]:
    """``(api_key, min_version, max_version)`` for ApiVersions: exactly what is implemented."""
    return [(s.api_key, s.min_version, s.max_version) for s in registered()]


@dataclass(frozen=True)
class BrokerInfo:
    """One node of the cluster as Kafka clients see it."""

    broker_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass
class ClusterView:
    """This node's identity on the Kafka listener and the cluster it knows (service.kafka.cluster's membership).

    Every method but ``me`` may read the metadata store: call them through ``ctx.run``.
    """

    broker_id: int
    host: str
    port: int
    cluster_id: str = "tiercompact"
    #: the cluster registry membership (None: a lone listener, e.g. in unit tests)
    membership: Any = None

    @property
    def me(self) -> BrokerInfo:
        return BrokerInfo(self.broker_id, self.host, self.port)

    def brokers(self) -> list[BrokerInfo]:
        """Live brokers, this one always among them, by id."""
        if self.membership is None:
            return [self.me]
        return list(self.membership.live_brokers())

    def controller_id(self) -> int:
        """The lowest live broker id (there is no controller election; Metadata needs a name)."""
        return min(b.broker_id for b in self.brokers())

    def topic_id(self, topic: str) -> uuid.UUID:
        """The topic's stable id, the same on every node sharing the metadata store."""
        if self.membership is None:
            return uuid.uuid5(uuid.NAMESPACE_URL, f"tiercompact-topic:{topic}")
        return self.membership.topic_id(topic)

    def topic_ids(self) -> dict[str, uuid.UUID]:
        return {} if self.membership is None else dict(self.membership.topic_ids())


@dataclass(frozen=True)
class RequestHeaderInfo:
    """The parts of Kafka's request header a handler may need."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


@dataclass
class ConnectionState:
    """Per-connection facts that outlive one request: the peer, TLS, and the SASL outcome."""

    peer: str
    tls: bool = False
    principal: str | None = None
    sasl_mechanism: str | None = None
    #: the SASL exchange in progress (service.kafka.sasl keeps its state here)
    sasl_state: Any = None
    #: set by a handler whose answer must be the connection's last (a refused authentication)
    close_after_response: bool = False
    #: the listener's metrics (None in unit tests)
    listener_metrics: Any = None
    #: the connection's ordered lane of pipelined work (service.kafka.lane.Lane; set by the listener)
    lane: Any = None
    extra: dict[str, Any] = field(default_factory=dict)


class RequestContext:
    """What a handler gets beside its decoded request (see the module docstring)."""

    def __init__(self, *, node: Node, header: RequestHeaderInfo, spec: ApiSpec, connection: ConnectionState,
                 cluster: ClusterView, runner: Callable[..., Awaitable[Any]],
                 waiter: Callable[[Iterable[TopicPartition], float], Awaitable[bool]],
                 listener: Any = None) -> None:
        self.node = node
        self.header = header
        self.spec = spec
        self.connection = connection
        self.cluster = cluster
        self.listener = listener
        self._runner = runner
        self._waiter = waiter
        #: set by a handler that knows its answer's error codes and the records it took (Produce), so the metrics
        #: need not walk the messages again: the codes, and per topic (bytes, records) appended
        self.error_codes: list[int] | None = None
        self.produced: dict[str, tuple[int, int]] | None = None

    @property
    def api_version(self) -> int:
        return self.header.api_version

    @property
    def principal(self) -> str | None:
        return self.connection.principal

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` on the listener's worker threads (never block the event loop)."""
        return await self._runner(fn, *args)

    def in_order(self, fn: Callable[..., Any], *args: Any, size: int = 0,
                 finish: Callable[[list[Any]], None] | None = None) -> asyncio.Future[Any]:
        """Queue ``fn(*args)`` on the connection's lane: it runs on a worker thread after the work of every earlier
        request of the connection, batched with its neighbours (only for ``pipelined`` APIs), and ``finish`` then
        gets the results of the job's items that named it (the acks=-1 fsync); ``size`` is the payload it holds, for
        the lane's memory bound."""
        lane = self.connection.lane
        if lane is None:  # a handler called outside a listener (unit tests): run it alone
            return asyncio.ensure_future(self._runner(_alone, fn, args, finish))
        return lane.submit(fn, *args, size=size, finish=finish)

    async def wait_for_append(self, tps: Iterable[TopicPartition], timeout_s: float) -> bool:
        """Wait until one of ``tps`` gets an append (True) or ``timeout_s`` passes (False)."""
        return await self._waiter(tps, timeout_s)

    def response(self, **fields: Any) -> Any:
        """The API's response message at the request's version (unknown-version fields are dropped on encode)."""
        # at the request's version where kafka.protocol describes it (its encoder then finds every field set)
        version = self.api_version if self.api_version >= self.spec.native_min else None
        return self.spec.response_cls(**fields, version=version)

    @staticmethod
    def later(awaitable: Awaitable[Any]) -> asyncio.Future[Any]:
        """Wrap an awaitable answer so the connection's next request is dispatched without waiting for it."""
        return asyncio.ensure_future(awaitable)


def _alone(fn: Callable[..., Any], args: tuple[Any, ...], finish: Callable[[list[Any]], None] | None) -> Any:
    """A lane item run on its own (no listener): its work, then its finish step."""
    value = fn(*args)
    if finish is not None:
        finish([value])
    return value
