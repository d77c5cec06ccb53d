"""The soak's client: a separate process driving a real ``tiercompact serve`` over HTTP.

Worker threads run a random mix of operations (plain, idempotent and transactional
produce with COMMIT/ABORT markers, tombstones, reads in both isolations, roll, tier,
clean, leadership moves with increasing epochs, config changes, status reads, and
probes with invalid input), keeping :class:`tests.soak.model.Model` up to date. The
orchestrator (tests/soak/harness.py) talks to this process through two queues:

* ``("check", generation)``: after a restart: workers pause, open transactions are
  finished, every partition is read in full in both isolations and checked; answer
  ``("checked", generation, n_violations)``;
* ``("final", None)``: workers stop, the system is settled (roll, tier, clean, wait) and
  checked once more; answer ``("final", summary)``.

Every request is bounded by ``REQUEST_TIMEOUT_S``; a timeout counts as a hung request.
"""

from __future__ import annotations

import contextlib
import itertools
import queue
import random
import threading
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.soak.model import HEADER, Model, Rec, Txn, Violation, check_read

REQUEST_TIMEOUT_S = 30.0
#: how long a waited clean may wait before it answers 202 and goes on as a job (within REQUEST_TIMEOUT_S)
CLEAN_WAIT_S = 20.0
LONG_MAX = 2**63 - 1
STORE_HEALTHY_GRACE_S = 20.0  # store-related 5xx within this long after a fault are expected
MAX_RETRIES = 8


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    config: dict[str, Any]
    keys: int = 60

    @property
    def compacted(self) -> bool:
        return "compact" in self.config.get("cleanup.policy", "compact")

    @property
    def tiered(self) -> bool:
        return bool(self.config.get("remote.storage.enable"))


TOPICS = (
    TopicSpec("cmp", 2, {"cleanup.policy": "compact", "segment.bytes": 16384, "min.cleanable.dirty.ratio": 0.2,
                         "delete.retention.ms": 3000, "file.delete.delay.ms": 1000}),
    TopicSpec("tier", 2, {"cleanup.policy": "compact", "remote.storage.enable": True, "segment.bytes": 16384,
                          "local.retention.ms": 5000, "min.cleanable.dirty.ratio": 0.2,
                          "file.delete.delay.ms": 1000}),
    TopicSpec("txn", 1, {"cleanup.policy": "compact", "remote.storage.enable": True, "segment.bytes": 8192,
                         "local.retention.ms": 10000, "min.cleanable.dirty.ratio": 0.1,
                         "delete.retention.ms": 5000}, keys=40),
    TopicSpec("log", 1, {"cleanup.policy": "delete", "remote.storage.enable": True, "segment.bytes": 16384,
                         "retention.ms": -1, "retention.bytes": -1, "local.retention.ms": 3000}),
)
PROBE_TOPIC = TopicSpec("probe", 1, {"cleanup.policy": "compact", "remote.storage.enable": True,
                                     "segment.bytes": 4096})

CONFIG_CHOICES: dict[str, list[Any]] = {
    "min.cleanable.dirty.ratio": [0.01, 0.1, 0.3, 0.5],
    "segment.bytes": [4096, 8192, 16384, 65536],
    "segment.ms": [3000, 10000, 604800000],
    "max.compaction.lag.ms": [5000, 30000, LONG_MAX],
    "file.delete.delay.ms": [0, 1000, 60000],
    "compression.type": ["producer", "zstd", "lz4", "gzip"],
}
TIERED_CONFIG_CHOICES: dict[str, list[Any]] = {"local.retention.ms": [1000, 5000, 30000, -1]}
COMPACT_CONFIG_CHOICES: dict[str, list[Any]] = {"delete.retention.ms": [1000, 5000, 86400000]}

OPS = {  # name: weight
    "produce": 28, "produce_idempotent": 14, "transaction": 10, "read": 14, "describe": 5, "roll": 4,
    "tier": 5, "clean": 4, "clean_async": 2, "leadership": 2, "config": 3, "status": 3, "probe": 2,
}


@dataclass
class Outcome:
    """What one HTTP request did: ``ok`` (2xx), ``rejected`` (4xx: not applied), ``refused``
    (no connection: not applied) or ``unknown`` (timeout, 5xx, dropped connection)."""

    kind: str
    status: int | None
    body: Any
    latency: float
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.kind == "ok"


@dataclass
class Producer:
    producer_id: int
    epoch: int = 0
    next_seq: int = 0


@dataclass
class Stats:
    requests: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    statuses: Counter[str] = field(default_factory=Counter)
    max_latency: float = 0.0
    max_latency_req: str = ""
    latencies: list[float] = field(default_factory=list)
    records_sent: int = 0
    records_acked: int = 0
    checks: int = 0
    check_violations: int = 0


class Client:
    def __init__(self, cfg: dict[str, Any], shared: dict[str, Any], cmd_q: Any, res_q: Any) -> None:
        self.url = cfg["url"]
        self.seed = cfg["seed"]
        self.n_workers = cfg.get("workers", 3)
        self.shared = shared
        self.cmd_q, self.res_q = cmd_q, res_q
        self.model = Model()
        self.lock = threading.RLock()
        self.stats = Stats()
        self.failures: list[dict[str, Any]] = []
        self.violations_seen: set[str] = set()
        self.topics = {t.name: t for t in TOPICS}
        self.tps = [(t.name, p) for t in TOPICS for p in range(t.partitions)]
        self.epochs: dict[tuple[str, int], int] = {}
        self.max_acked: dict[tuple[str, int], int] = {}
        self.pending_markers: list[Txn] = []
        self._pid_counter = itertools.count(1000)
        self._rid_counter = itertools.count(1)
        self._stop = threading.Event()
        self._pause = threading.Event()
        self._resume = threading.Condition()
        self._paused = 0
        self._workers: list[threading.Thread] = []
        self._last_done: dict[int, float] = {}  # id(http client) -> when its last answer came
        self._config_lock = threading.Lock()  # PATCHes one at a time, so each answer can be checked

    # ---- bookkeeping --------------------------------------------------------------------
    def log(self, msg: str) -> None:
        print(f"[soak-client {time.strftime('%H:%M:%S')}] {msg}", flush=True)

    def fail(self, kind: str, detail: str, **extra: Any) -> None:
        with self.lock:
            entry = {"kind": kind, "detail": detail[:4000], "time": time.strftime("%H:%M:%S"),
                     "generation": self.shared["generation"].value, **extra}
            self.failures.append(entry)
        self.log(f"FAILURE {kind}: {detail[:600]}")

    def store_healthy(self) -> bool:
        """The fault proxy has been passing everything for a while."""
        if self.shared["fault_active"].value:
            return False
        return time.time() - self.shared["fault_clear_since"].value > STORE_HEALTHY_GRACE_S

    def new_rid(self, worker: int) -> str:
        with self.lock:
            return f"w{worker}r{next(self._rid_counter)}"

    def new_pid(self) -> int:
        with self.lock:
            return next(self._pid_counter)

    # ---- HTTP ------------------------------------------------------------------------------
    def call(self, http: httpx.Client, op: str, method: str, path: str, *, json: Any = None,
             params: dict[str, Any] | None = None, tolerate: tuple[int, ...] = (), store: bool = False,
             expect_4xx: bool = False) -> Outcome:
        """One request, classified and counted; unexpected answers are recorded as failures.

        ``tolerate``: non-2xx statuses that are a normal answer here (e.g. 409 for a clean that
        is already running). ``store``: the request touches the object store, so 502/503/504
        are expected while the store is faulty. ``expect_4xx``: a probe with invalid input."""
        gen0 = self.shared["generation"].value
        up0 = self.shared["up_generation"].value == gen0  # not between a kill and the restart
        t0 = time.monotonic()
        desc = f"{method} {path}" + (f" params={params}" if params else "")
        with self.lock:
            self.stats.requests[op] += 1
        try:
            resp = http.request(method, path, json=json, params=params)
        except httpx.TimeoutException as e:
            lat = time.monotonic() - t0
            self._count(op, "timeout", lat, desc)
            self.fail("hung", f"{desc} got no answer within {REQUEST_TIMEOUT_S:.0f}s ({type(e).__name__})",
                      request=_short(json))
            return Outcome("unknown", None, None, lat, type(e).__name__)
        except httpx.ConnectError as e:
            lat = time.monotonic() - t0
            self._count(op, "refused", lat, desc)
            return Outcome("refused", None, None, lat, type(e).__name__)
        except httpx.TransportError as e:
            lat = time.monotonic() - t0
            self._count(op, "dropped", lat, desc)
            if self.shared["generation"].value == gen0:
                time.sleep(1.0)  # a kill in progress bumps the generation first
            # a connection idle for about uvicorn's keep-alive timeout (5 s) may be closed by
            # the server just as it is reused: that race is not the server's fault
            idle = t0 - self._last_done.get(id(http), t0)
            if up0 and self.shared["generation"].value == gen0 and idle < 4.0:
                self.fail("dropped", f"{desc}: connection dropped while the server was up: {type(e).__name__}: {e}",
                          request=_short(json))
            return Outcome("unknown", None, None, lat, type(e).__name__)
        lat = time.monotonic() - t0
        self._last_done[id(http)] = time.monotonic()
        status = resp.status_code
        try:
            body = resp.json()
        except ValueError:
            body = resp.text[:500]
        self._count(op, str(status), lat, desc)
        if 200 <= status < 300:
            if expect_4xx:
                self.fail("validation", f"{desc} with invalid input answered {status}: {_short(body)}",
                          request=_short(json))
            return Outcome("ok", status, body, lat)
        if expect_4xx and 400 <= status < 500:
            return Outcome("rejected", status, body, lat)
        if status in tolerate:
            return Outcome("rejected" if status < 500 else "unknown", status, body, lat)
        if status >= 500:
            restarted = not up0 or self.shared["generation"].value != gen0
            expected = (status in (502, 503, 504) and store and not self.store_healthy())
            if not expected and not restarted:
                self.fail(f"http-{status}", f"{desc} answered {status}: {_short(body)}", request=_short(json))
            return Outcome("unknown", status, body, lat)
        self.fail(f"http-{status}", f"{desc} answered {status}: {_short(body)}", request=_short(json))
        return Outcome("rejected", status, body, lat)

    def _count(self, op: str, outcome: str, lat: float, desc: str) -> None:
        with self.lock:
            s = self.stats
            s.outcomes[f"{op}:{outcome}"] += 1
            s.statuses[outcome] += 1
            s.latencies.append(lat)
            if lat > s.max_latency:
                s.max_latency, s.max_latency_req = lat, desc

    # ---- setup -----------------------------------------------------------------------------
    def setup(self, http: httpx.Client) -> None:
        for t in (*TOPICS, PROBE_TOPIC):
            for _ in range(30):
                o = self.call(http, "create_topic", "POST", "/v1/topics",
                              json={"name": t.name, "partitions": t.partitions, "config": t.config},
                              tolerate=(409, 503))
                if o.status in (201, 409):
                    break
                time.sleep(1)
            else:
                raise RuntimeError(f"could not create topic {t.name}")
        for tp in self.tps:
            self.epochs[tp] = 0

    # ---- workers ---------------------------------------------------------------------------
    def start_workers(self) -> None:
        for i in range(self.n_workers):
            t = threading.Thread(target=self._worker, args=(i,), name=f"soak-worker-{i}", daemon=True)
            t.start()
            self._workers.append(t)

    def _worker(self, idx: int) -> None:
        rng = random.Random(self.seed * 1000 + idx)
        names = list(OPS)
        weights = [OPS[n] for n in names]
        producers: dict[tuple[str, int], Producer] = {}
        txn_producers: dict[tuple[str, int], Producer] = {}
        with httpx.Client(base_url=self.url, timeout=REQUEST_TIMEOUT_S) as http:
            while not self._stop.is_set():
                if self._pause.is_set():
                    with self._resume:
                        self._paused += 1
                        self._resume.notify_all()
                        while self._pause.is_set() and not self._stop.is_set():
                            self._resume.wait(0.5)
                        self._paused -= 1
                    continue
                op = rng.choices(names, weights)[0]
                try:
                    getattr(self, f"op_{op}")(http, rng, idx, producers, txn_producers)
                except Exception as e:  # a bug in the client must not look like a pass
                    self.fail("client-error", f"op {op}: {type(e).__name__}: {e}\n{traceback.format_exc()}")
                    time.sleep(0.5)
                if self.shared["generation"].value != self.shared["up_generation"].value:
                    time.sleep(0.2)  # the server is restarting
                time.sleep(rng.uniform(0.0, 0.02))

    def pause_workers(self, timeout: float = 120.0) -> None:
        self._pause.set()
        deadline = time.monotonic() + timeout
        with self._resume:
            while self._paused < len([w for w in self._workers if w.is_alive()]):
                if time.monotonic() > deadline:
                    self.fail("hung", f"workers did not pause within {timeout}s (a request is stuck)")
                    return
                self._resume.wait(0.5)

    def resume_workers(self) -> None:
        with self._resume:
            self._pause.clear()
            self._resume.notify_all()

    def stop_workers(self) -> None:
        self._stop.set()
        self.resume_workers()
        for w in self._workers:
            w.join(REQUEST_TIMEOUT_S * (MAX_RETRIES + 2))
            if w.is_alive():
                self.fail("hung", f"{w.name} did not stop")

    # ---- operations ------------------------------------------------------------------------
    def _pick_tp(self, rng: random.Random, *, compacted: bool | None = None,
                 tiered: bool | None = None) -> tuple[str, int] | None:
        cands = [tp for tp in self.tps
                 if (compacted is None or self.topics[tp[0]].compacted == compacted)
                 and (tiered is None or self.topics[tp[0]].tiered == tiered)]
        return rng.choice(cands) if cands else None

    def _records(self, rng: random.Random, rid: str, tp: tuple[str, int], n: int,
                 txn: Txn | None = None) -> tuple[list[dict[str, Any]], list[Rec]]:
        spec = self.topics[tp[0]]
        body, recs = [], []
        with self.lock:
            for i in range(n):
                key = f"k{rng.randrange(spec.keys)}"
                tomb = spec.compacted and rng.random() < 0.1
                value = None if tomb else f"{rid}.{i}-{rng.getrandbits(40):010x}" + "x" * rng.randrange(0, 120)
                r = self.model.add(f"{rid}.{i}", tp[0], tp[1], key, value, txn)
                recs.append(r)
                body.append({"key": key, "value": value, "headers": [{"key": HEADER, "value": r.rid}]})
            self.stats.records_sent += n
        return body, recs

    def _settle_records(self, recs: list[Rec], o: Outcome, desc: str) -> None:
        with self.lock:
            if o.ok:
                base, last = int(o.body["base_offset"]), int(o.body["last_offset"])
                if last - base + 1 != len(recs):
                    self.fail("offsets", f"{desc}: {len(recs)} records acknowledged as offsets {base}..{last}")
                for i, r in enumerate(recs):
                    r.status, r.offset = "acked", base + i
                if recs:
                    tp = (recs[0].topic, recs[0].partition)
                    self.max_acked[tp] = max(self.max_acked.get(tp, -1), last)
                self.stats.records_acked += len(recs)
            elif o.kind in ("rejected", "refused"):
                for r in recs:
                    r.status = "failed"
            else:
                for r in recs:
                    r.status = "unknown"

    def _path(self, tp: tuple[str, int]) -> str:
        return f"/v1/topics/{tp[0]}/partitions/{tp[1]}"

    def op_produce(self, http: httpx.Client, rng: random.Random, idx: int, *_: Any) -> None:
        tp = self._pick_tp(rng)
        assert tp is not None
        rid = self.new_rid(idx)
        body, recs = self._records(rng, rid, tp, rng.randint(1, 15))
        req = {"records": body, "compression": rng.choice(["none", "none", "gzip", "lz4", "zstd", "snappy"])}
        o = self.call(http, "produce", "POST", f"{self._path(tp)}/records", json=req)
        self._settle_records(recs, o, f"produce {rid} to {tp}")

    def _produce_seq(self, http: httpx.Client, rng: random.Random, op: str, tp: tuple[str, int], prod: Producer,
                     recs: list[Rec], body: list[dict[str, Any]], transactional: bool) -> Outcome:
        """An idempotent append: retried with the same sequence until it is answered."""
        req = {"records": body, "compression": rng.choice(["none", "zstd", "lz4"]),
               "producer": {"id": prod.producer_id, "epoch": prod.epoch, "base_sequence": prod.next_seq,
                            "transactional": transactional}}
        o = Outcome("unknown", None, None, 0.0)
        maybe_landed = False
        for attempt in range(MAX_RETRIES):
            o = self.call(http, op, "POST", f"{self._path(tp)}/records", json=req, tolerate=(409,))
            if o.ok:
                break
            if o.kind == "rejected":
                if o.status == 409 and maybe_landed:
                    # the earlier attempt may have landed and a retry of it must be a duplicate
                    self.fail("idempotence", f"{op} retry of producer {prod.producer_id} seq {prod.next_seq} to "
                                             f"{tp} answered 409 after an unknown attempt: {_short(o.body)}")
                elif o.status == 409:
                    self.fail("http-409", f"{op} producer {prod.producer_id} seq {prod.next_seq} to {tp} answered "
                                          f"409: {_short(o.body)}")
                break
            if o.kind == "unknown":
                maybe_landed = True
            time.sleep(min(0.2 * 2 ** attempt, 3.0))
        if not o.ok and maybe_landed:
            o = Outcome("unknown", o.status, o.body, o.latency)
        self._settle_records(recs, o, f"{op} to {tp}")
        if o.ok:
            prod.next_seq += len(recs)
        return o

    def op_produce_idempotent(self, http: httpx.Client, rng: random.Random, idx: int,
                              producers: dict[tuple[str, int], Producer], *_: Any) -> None:
        tp = self._pick_tp(rng)
        assert tp is not None
        prod = producers.get(tp)
        if prod is None:
            prod = producers[tp] = Producer(self.new_pid())
        rid = self.new_rid(idx)
        body, recs = self._records(rng, rid, tp, rng.randint(1, 10))
        o = self._produce_seq(http, rng, "produce_idempotent", tp, prod, recs, body, False)
        if not o.ok:
            producers.pop(tp)  # sequence in doubt: a fresh producer id

    def op_transaction(self, http: httpx.Client, rng: random.Random, idx: int,
                       producers: dict[tuple[str, int], Producer],
                       txn_producers: dict[tuple[str, int], Producer]) -> None:
        self.retry_pending_markers(http, budget_s=5)
        tp = self._pick_tp(rng, compacted=True) if rng.random() < 0.5 else ("txn", 0)
        assert tp is not None
        prod = txn_producers.get(tp)
        if prod is None:
            prod = txn_producers[tp] = Producer(self.new_pid())
        rid = self.new_rid(idx)
        txn = Txn(rid, tp[0], tp[1], prod.producer_id, prod.epoch)
        with self.lock:
            self.model.txns[rid] = txn
        ok = True
        for b in range(rng.randint(1, 3)):
            body, recs = self._records(rng, f"{rid}b{b}", tp, rng.randint(1, 8), txn)
            o = self._produce_seq(http, rng, "txn_produce", tp, prod, recs, body, True)
            if not o.ok:
                ok = False
                break
        if not ok:
            txn_producers.pop(tp)
        kind = "commit" if ok and rng.random() < 0.7 else "abort"
        self.write_marker(http, txn, kind)

    def write_marker(self, http: httpx.Client, txn: Txn, kind: str) -> bool:
        with self.lock:
            txn.want = kind
            txn.state = "committing" if kind == "commit" else "aborting"
        for attempt in range(MAX_RETRIES):
            o = self.call(http, "marker", "POST", f"{self._path((txn.topic, txn.partition))}/markers",
                          json={"producer_id": txn.producer_id, "producer_epoch": txn.producer_epoch, "type": kind})
            if o.ok:
                with self.lock:
                    txn.state = "committed" if kind == "commit" else "aborted"
                    if txn in self.pending_markers:
                        self.pending_markers.remove(txn)
                return True
            if o.kind == "rejected":
                break
            time.sleep(min(0.2 * 2 ** attempt, 3.0))
        with self.lock:
            if txn not in self.pending_markers:
                self.pending_markers.append(txn)
        return False

    def retry_pending_markers(self, http: httpx.Client, budget_s: float) -> None:
        deadline = time.monotonic() + budget_s
        while time.monotonic() < deadline:
            with self.lock:
                todo = list(self.pending_markers)
            if not todo:
                return
            for txn in todo:
                if txn.want is not None:
                    self.write_marker(http, txn, txn.want)
            time.sleep(0.5)

    def op_read(self, http: httpx.Client, rng: random.Random, *_: Any) -> None:
        tp = self._pick_tp(rng)
        assert tp is not None
        with self.lock:
            hw = self.max_acked.get(tp, -1) + 1
        offset = rng.randint(0, hw) if hw else 0
        iso = rng.choice(["read_uncommitted", "read_committed"])
        o = self.call(http, "read", "GET", f"{self._path(tp)}/records",
                      params={"offset": offset, "max_records": rng.randint(1, 500), "isolation": iso},
                      store=self.topics[tp[0]].tiered)
        if not o.ok:
            return
        recs = o.body["records"]
        if recs and o.body["next_offset"] <= recs[-1]["offset"]:
            self.fail("read", f"read {tp} from {offset}: next_offset {o.body['next_offset']} <= last record "
                              f"{recs[-1]['offset']}")
        if recs and recs[0]["offset"] < offset:
            self.fail("read", f"read {tp} from {offset} returned offset {recs[0]['offset']}")
        with self.lock:
            vs = check_read(self.model, tp[0], tp[1], recs, isolation=iso, upper=LONG_MAX,
                            compacted=self.topics[tp[0]].compacted, full=False)
        self._report(vs, f"read {tp} from {offset} ({iso})")

    def _report(self, vs: list[Violation], ctx: str) -> None:
        for v in vs:
            self.fail(f"model:{v.kind}", f"{ctx}: {v.detail}")

    def op_describe(self, http: httpx.Client, rng: random.Random, *_: Any) -> None:
        tp = self._pick_tp(rng)
        assert tp is not None
        with self.lock:  # acknowledged before the request: the answer must cover them
            acked = self.max_acked.get(tp, -1)
        o = self.call(http, "describe", "GET", self._path(tp), store=self.topics[tp[0]].tiered)
        if not o.ok:
            return
        b = o.body
        if b["high_watermark"] <= acked:
            self.fail("describe", f"{tp}: high_watermark {b['high_watermark']} <= acknowledged offset {acked}")
        if b["last_stable_offset"] > b["high_watermark"]:
            self.fail("describe", f"{tp}: last_stable_offset {b['last_stable_offset']} > high_watermark")

    def op_roll(self, http: httpx.Client, rng: random.Random, *_: Any) -> None:
        tp = self._pick_tp(rng)
        assert tp is not None
        self.call(http, "roll", "POST", f"{self._path(tp)}/roll")

    def op_tier(self, http: httpx.Client, rng: random.Random, *_: Any) -> None:
        tp = self._pick_tp(rng, tiered=True)
        assert tp is not None
        self.call(http, "tier", "POST", f"{self._path(tp)}/tier", store=True, tolerate=(409,))

    def op_clean(self, http: httpx.Client, rng: random.Random, *_: Any) -> None:
        tp = self._pick_tp(rng, compacted=True)
        assert tp is not None
        # waited, but within the request budget: a round that takes longer answers 202 and goes on as a job
        o = self.call(http, "clean", "POST", f"{self._path(tp)}/clean",
                      params={"wait": "true", "timeout_s": CLEAN_WAIT_S},
                      store=self.topics[tp[0]].tiered, tolerate=(409,))
        if o.ok and o.status == 202:
            self._follow_job(http, tp, o.body["job_id"])

    def op_clean_async(self, http: httpx.Client, rng: random.Random, *_: Any) -> None:
        tp = self._pick_tp(rng, compacted=True)
        assert tp is not None
        o = self.call(http, "clean_async", "POST", f"{self._path(tp)}/clean", params={"wait": "false"},
                      store=self.topics[tp[0]].tiered, tolerate=(409,))
        if o.ok:
            self._follow_job(http, tp, o.body["job_id"])

    def _follow_job(self, http: httpx.Client, tp: Any, job: str) -> None:
        gen0 = self.shared["generation"].value
        deadline = time.monotonic() + REQUEST_TIMEOUT_S * 2
        while time.monotonic() < deadline and self.shared["generation"].value == gen0:
            j = self.call(http, "job", "GET", f"/v1/jobs/{job}", tolerate=(404,))
            if not j.ok:
                return
            if j.body["state"] in ("succeeded", "failed"):
                err = j.body.get("error") or ""
                benign = any(s in err for s in ("CleanerStateError", "LogCleaningAborted", "aborted", "paused",
                                                "in progress", "Fenced", "fenced"))
                if j.body["state"] == "failed" and not benign and self.store_healthy():
                    self.fail("job-failed", f"clean job {job} on {tp} failed: {err}")
                return
            time.sleep(0.5)
        if self.shared["generation"].value == gen0:
            self.fail("hung", f"clean job {job} on {tp} still not done after {REQUEST_TIMEOUT_S * 2:.0f}s")

    def op_leadership(self, http: httpx.Client, rng: random.Random, *_: Any) -> None:
        tp = self._pick_tp(rng)
        assert tp is not None
        d = self.call(http, "describe", "GET", self._path(tp), store=self.topics[tp[0]].tiered)
        if not d.ok:
            return
        with self.lock:
            epoch = max(self.epochs.get(tp, 0), int(d.body["leader_epoch"])) + 1
            self.epochs[tp] = epoch
        o = self.call(http, "leadership", "POST", f"{self._path(tp)}/leadership",
                      json={"leader_epoch": epoch, "broker_id": 0}, store=self.topics[tp[0]].tiered,
                      tolerate=(409,))  # another worker's higher epoch may land first
        # The answer describes the partition when it is sent: a new leader first pauses the
        # partition's cleaning (up to a minute), and another worker's higher epoch may land in
        # that time. A lower epoch than the one this request established would be a lost move.
        if o.ok and int(o.body["leader_epoch"]) < epoch:
            self.fail("leadership", f"{tp}: moved to epoch {epoch} but the partition says {o.body['leader_epoch']}")

    def op_config(self, http: httpx.Client, rng: random.Random, *_: Any) -> None:
        spec = self.topics[rng.choice(list(self.topics))]
        choices = dict(CONFIG_CHOICES)
        if spec.tiered:
            choices.update(TIERED_CONFIG_CHOICES)
        if spec.compacted:
            choices.update(COMPACT_CONFIG_CHOICES)
        key = rng.choice(sorted(choices))
        value = rng.choice(choices[key])
        with self._config_lock:
            o = self.call(http, "config", "PATCH", f"/v1/topics/{spec.name}/config", json={"config": {key: value}})
        if o.ok and o.body["config"].get(key) != value:
            self.fail("config", f"PATCH {spec.name} {key}={value!r} answered config {o.body['config']}")

    def op_status(self, http: httpx.Client, rng: random.Random, *_: Any) -> None:
        path = rng.choice(["/v1/cleaner", "/metrics", "/healthz", "/v1/topics"])
        o = self.call(http, "status", "GET", path)
        if o.ok and path == "/v1/cleaner" and o.body.get("dead_threads"):
            self.fail("dead-thread", f"/v1/cleaner reports dead threads: {_short(o.body)}")

    def op_probe(self, http: httpx.Client, rng: random.Random, *_: Any) -> None:
        """Invalid input must be a 4xx naming the problem, never a 2xx or a 5xx."""
        p = f"/v1/topics/{PROBE_TOPIC.name}/partitions/0"
        case = rng.randrange(12)
        if case == 0:
            self.call(http, "probe", "POST", f"{p}/leadership", json={"leader_epoch": 2**31, "broker_id": 0},
                      expect_4xx=True)
        elif case == 1:
            self.call(http, "probe", "POST", f"{p}/records", expect_4xx=True, json={
                "records": [{"key": "a", "value": "b"}],
                "producer": {"id": 2**63, "epoch": 0, "base_sequence": 0}})
        elif case == 2:
            self.call(http, "probe", "POST", f"{p}/records", expect_4xx=True,
                      json={"records": [{"key": "a", "value": "b", "timestamp": 2**63}]})
        elif case == 3:
            self.call(http, "probe", "PATCH", f"/v1/topics/{PROBE_TOPIC.name}/config", expect_4xx=True,
                      json={"config": {"min.compaction.lag.ms": 10_000, "max.compaction.lag.ms": 5_000}})
        elif case == 4:
            o = self.call(http, "probe", "PATCH", f"/v1/topics/{PROBE_TOPIC.name}/config", expect_4xx=True,
                          json={"config": {"remote.storage.enable": False}})
            if o.ok:  # undo, so the probe topic stays as it was
                self.call(http, "probe", "PATCH", f"/v1/topics/{PROBE_TOPIC.name}/config",
                          json={"config": {"remote.storage.enable": True}})
        elif case == 5:
            self.call(http, "probe", "POST", "/v1/topics", expect_4xx=True,
                      json={"name": "bad\n", "partitions": 1, "config": {}})
        elif case == 6:
            self.call(http, "probe", "GET", f"{p}/records", expect_4xx=True,
                      params={"offset": 0, "isolation": "read_sometimes"})
        elif case == 7:
            self.call(http, "probe", "POST", f"{p}/leadership", json={"leader_epoch": 1, "broker_id": 2**63},
                      expect_4xx=True)
        elif case == 8:
            self.call(http, "probe", "GET", f"{p}/records", expect_4xx=True, params={"offset": 2**63})
        elif case == 9:
            self.call(http, "probe", "PATCH", f"/v1/topics/{PROBE_TOPIC.name}/config", expect_4xx=True,
                      json={"config": {"segment.bytes": 2**63}})
        elif case == 10:
            self.call(http, "probe", "POST", f"{p}/records", expect_4xx=True, json={
                "records": [{"key": "a", "value": "b"}],
                "producer": {"id": 1, "epoch": 2**15, "base_sequence": 0}})
        else:
            self.call(http, "probe", "POST", f"{p}/markers", expect_4xx=True,
                      json={"producer_id": 1, "producer_epoch": 0, "type": "maybe"})

    # ---- checks ------------------------------------------------------------------------------
    def _get_retry(self, http: httpx.Client, op: str, path: str, params: dict[str, Any] | None = None,
                   budget_s: float = 90.0) -> Outcome:
        """A GET retried while the server restarts or the store recovers (bounded)."""
        deadline = time.monotonic() + budget_s
        while True:
            o = self.call(http, op, "GET", path, params=params, store=True, tolerate=(502, 503))
            if o.ok or o.kind == "rejected" or time.monotonic() > deadline or o.error == "ReadTimeout":
                return o
            time.sleep(1.0)

    def read_all(self, http: httpx.Client, tp: tuple[str, int], iso: str) -> list[dict[str, Any]] | None:
        out: list[dict[str, Any]] = []
        offset = 0
        for _ in range(100_000):
            o = self._get_retry(http, "check_read", f"{self._path(tp)}/records",
                                params={"offset": offset, "max_records": 500, "isolation": iso})
            if not o.ok:
                self.fail("check", f"read {tp} from {offset} ({iso}) failed: {o.status} {_short(o.body)}")
                return None
            recs = o.body["records"]
            if not recs:
                return out
            out += recs
            if o.body["next_offset"] <= offset:
                self.fail("check", f"read {tp} from {offset} ({iso}) did not advance: {o.body['next_offset']}")
                return None
            offset = o.body["next_offset"]
        return out

    def check_all(self, http: httpx.Client, ctx: str) -> int:
        """Read every partition in full in both isolations and check it against the model."""
        self.retry_pending_markers(http, budget_s=90)
        with self.lock:
            if self.pending_markers:
                self.fail("check", f"{ctx}: transaction markers could not be written: "
                                   f"{[t.txn_id for t in self.pending_markers]}")
        n = 0
        for tp in self.tps:
            d = self._get_retry(http, "check_describe", self._path(tp))
            if not d.ok:
                self.fail("check", f"{ctx}: describe {tp} failed: {d.status} {_short(d.body)}")
                n += 1
                continue
            bounds = {"read_uncommitted": int(d.body["high_watermark"]),
                      "read_committed": int(d.body["last_stable_offset"])}
            for iso in ("read_uncommitted", "read_committed"):
                recs = self.read_all(http, tp, iso)
                if recs is None:
                    n += 1
                    continue
                with self.lock:
                    vs = check_read(self.model, tp[0], tp[1], recs, isolation=iso, upper=bounds[iso],
                                    compacted=self.topics[tp[0]].compacted)
                self._report(vs, ctx)
                n += len(vs)
        with self.lock:
            self.stats.checks += 1
            self.stats.check_violations += n
        return n

    def settle(self, http: httpx.Client) -> dict[str, Any]:
        """Roll, tier and clean every partition twice, waiting between rounds."""
        notes: dict[str, Any] = {}
        for rnd in range(2):
            for tp in self.tps:
                self.call(http, "roll", "POST", f"{self._path(tp)}/roll")
                if self.topics[tp[0]].tiered:
                    for _ in range(10):
                        o = self.call(http, "tier", "POST", f"{self._path(tp)}/tier", store=True,
                                      tolerate=(409, 502, 503))
                        if o.ok:
                            break
                        time.sleep(1)
                if self.topics[tp[0]].compacted:
                    for _ in range(10):
                        o = self.call(http, "clean", "POST", f"{self._path(tp)}/clean", params={"wait": "true"},
                                      store=True, tolerate=(409, 502, 503))
                        if o.ok:
                            notes[f"{tp[0]}-{tp[1]} round {rnd}"] = {
                                k: o.body.get(k) for k in ("checkpoint", "records_read", "records_retained")}
                            break
                        time.sleep(1)
            time.sleep(3)
        return notes

    def compaction_observations(self, http: httpx.Client) -> dict[str, Any]:
        """How compacted the compacted partitions are below their cleaner checkpoint (not a pass
        criterion: the cleaner may legitimately keep a producer's last batch and open txns)."""
        out: dict[str, Any] = {}
        for tp in self.tps:
            if not self.topics[tp[0]].compacted:
                continue
            d = self._get_retry(http, "check_describe", self._path(tp))
            recs = self.read_all(http, tp, "read_uncommitted")
            if not d.ok or recs is None:
                continue
            cp = d.body.get("cleaner_checkpoint") or 0
            below = [r for r in recs if r["offset"] < cp]
            keys = Counter(r["key"] for r in below)
            out[f"{tp[0]}-{tp[1]}"] = {"cleaner_checkpoint": cp, "records": len(recs), "below_checkpoint": len(below),
                                       "duplicate_keys_below_checkpoint": sum(1 for c in keys.values() if c > 1),
                                       "high_watermark": d.body["high_watermark"]}
        return out

    # ---- main loop ---------------------------------------------------------------------------
    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=REQUEST_TIMEOUT_S) as http:
            self.setup(http)
            self.res_q.put(("ready", None, None))
            self.start_workers()
            while True:
                try:
                    cmd, arg = self.cmd_q.get(timeout=1.0)
                except queue.Empty:
                    continue
                if cmd == "check":
                    self.pause_workers()
                    n = self.check_all(http, f"after restart {arg}")
                    self.resume_workers()
                    self.res_q.put(("checked", arg, n))
                elif cmd == "final":
                    self.stop_workers()
                    self.retry_pending_markers(http, budget_s=60)
                    n = self.check_all(http, "before settle")
                    notes = self.settle(http)
                    n += self.check_all(http, "after settle")
                    obs = self.compaction_observations(http)
                    st = self.call(http, "status", "GET", "/v1/cleaner")
                    cleaner = {k: st.body.get(k) for k in ("threads", "dead_threads", "uncleanable_partitions")} \
                        if st.ok else st.status
                    self.res_q.put(("final", self.summary(settle=notes, compaction=obs, cleaner=cleaner), n))
                    return
                elif cmd == "stop":
                    self.stop_workers()
                    self.res_q.put(("final", self.summary(), 0))
                    return

    def summary(self, **extra: Any) -> dict[str, Any]:
        with self.lock:
            s = self.stats
            lat = sorted(s.latencies)
            fates = Counter(r.status for r in self.model.records.values())
            txns = Counter(t.state for t in self.model.txns.values())
            return {
                "requests": sum(s.requests.values()),
                "requests_by_kind": dict(sorted(s.requests.items())),
                "answers": dict(sorted(s.statuses.items())),
                "answers_by_kind": dict(sorted(s.outcomes.items())),
                "max_latency_s": round(s.max_latency, 3),
                "max_latency_request": s.max_latency_req,
                "p50_latency_s": round(lat[len(lat) // 2], 4) if lat else None,
                "p99_latency_s": round(lat[int(len(lat) * 0.99)], 4) if lat else None,
                "records_sent": s.records_sent,
                "record_fates": dict(fates),
                "transactions": dict(txns),
                "checks": s.checks,
                "check_violations": s.check_violations,
                "failures": list(self.failures),
                **extra,
            }


def _short(x: Any, n: int = 600) -> str:
    s = str(x)
    return s if len(s) <= n else s[:n] + "..."


def client_main(cfg: dict[str, Any], shared: dict[str, Any], cmd_q: Any, res_q: Any) -> None:
    """Entry point of the client process (multiprocessing, spawn)."""
    client = Client(cfg, shared, cmd_q, res_q)
    try:
        client.run()
    except BaseException as e:
        with contextlib.suppress(Exception):
            client.fail("client-crash", f"{type(e).__name__}: {e}\n{traceback.format_exc()}")
            res_q.put(("final", client.summary(), 1))
        raise
