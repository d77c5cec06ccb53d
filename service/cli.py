"""The ``tiercompact`` console script: serve, demo, clean, spark-clean, dump-log, config-docs.

Every ServiceConfig option is a flag of ``serve`` (``--data-dir``, ``--remote``, ...);
``clean`` and ``spark-clean`` take only the options they use (:data:`DATA_DIR_OPTIONS`).
Flags override ``TIERCOMPACT_*`` environment variables, which override the config file,
which overrides the defaults (see service/config.py).

``clean`` and ``spark-clean`` open the data dir themselves, which a running ``serve``
owns (it holds the data dir's lock); beside a running service, ``clean --server URL``
(with ``--token``) sends the clean to it through the HTTP API instead.

Exit codes: 0 success, 1 the operation failed (a corrupt segment, a failed clean, the
server answered an error), 2 bad usage or configuration.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from log.errors import DataDirInUseError, TiercompactError
from service.config import ServiceConfig, ServiceConfigError, load_config, options_reference_markdown

if TYPE_CHECKING:
    from service.node import Node

#: the ServiceConfig options a one-off ``clean`` / ``spark-clean`` on a data dir uses: where the
#: data and the stores are, this node's identity, the cleaner's sizing; the rest only matter to
#: a running ``serve`` (HTTP, background threads, request limits)
DATA_DIR_OPTIONS = (
    "data_dir", "remote", "metadata", "s3_endpoint", "s3_region", "remote_retry_attempts", "remote_timeout_ms",
    "remote_connect_timeout_ms", "remote_read_timeout_ms", "broker_id", "metadata_lock_timeout_ms",
    "metadata_statement_timeout_ms", "dedupe_buffer_size", "io_max_bytes_per_second", "log_level",
)
SERVER_TIMEOUT_S = 3600.0
EXIT_SIGPIPE = 128 + 13  # what a shell reports for a process killed by SIGPIPE


def _add_option_flags(p: argparse.ArgumentParser | argparse._ArgumentGroup,
                      only: Collection[str] | None = None) -> None:
    p.add_argument("--config", metavar="FILE", help="TOML (or .json) config file")
    for name, f in ServiceConfig.model_fields.items():
        if only is not None and name not in only:
            continue
        flag = "--" + name.replace("_", "-")
        if f.annotation in (bool, "bool"):
            p.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction, default=None,
                           help=f.description)
        else:
            p.add_argument(flag, dest=name, default=None, metavar=name.upper(), help=f.description)


def _flags(args: argparse.Namespace) -> dict[str, Any]:
    return {name: getattr(args, name, None) for name in ServiceConfig.model_fields}


def _load(args: argparse.Namespace) -> ServiceConfig:
    return load_config(_flags(args), config_file=args.config)


def _add_server_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("beside a running service")
    g.add_argument("--server", metavar="URL", default=os.environ.get("TIERCOMPACT_SERVER"),
                   help="send the request to the tiercompact service at URL (e.g. http://127.0.0.1:8080) instead "
                        "of opening a data dir (env TIERCOMPACT_SERVER)")
    g.add_argument("--token", metavar="TOKEN", default=None,
                   help="bearer token of the service, with --server (env TIERCOMPACT_TOKEN)")
    g.add_argument("--timeout", metavar="SECONDS", type=float, default=SERVER_TIMEOUT_S,
                   help=f"how long to wait for the service's answer, with --server (default {SERVER_TIMEOUT_S:g})")


def _partition_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, *, help: str,
                      description: str) -> argparse.ArgumentParser:
    """A subcommand that names one partition: ``NAME TOPIC PARTITION``."""
    p = sub.add_parser(name, allow_abbrev=False, help=help, description=description)
    p.add_argument("topic")
    p.add_argument("partition", type=int)
    return p


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tiercompact", allow_abbrev=False,
                                     description="Kafka-style log compaction for tiered logs.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub.add_parser("serve", allow_abbrev=False, help="run the HTTP admin API and background cleaning/tiering")
    _add_option_flags(serve)

    clean = _partition_parser(
        sub, "clean", help="run one cleaning pass on a partition and print its stats (JSON)",
        description="Run one cleaning pass on a partition and print its stats (JSON). Beside a running "
                    "`tiercompact serve`, which owns the data dir, use --server URL to send the clean to it; "
                    "without --server the command opens the data dir itself (the service must be stopped).")
    clean.add_argument("--dry-run", action="store_true",
                       help="print the round's plan (segments to download, rewrite and skip, bytes, records "
                            "reclaimable) and change nothing")
    _add_server_flags(clean)
    _add_option_flags(clean.add_argument_group("without --server: the data dir and stores to open"),
                      DATA_DIR_OPTIONS)

    spark = sub.add_parser(
        "spark-clean", allow_abbrev=False, help="clean the remote tier of partitions with one Spark job (JSON)",
        description="Clean the remote tier of a topic's partitions with one Spark job and print the outcomes "
                    "(JSON). With --server URL the running service submits the job (to its configured Spark "
                    "master) and adopts the result; without, the command runs the driver itself against the "
                    "metadata store and object store alone (it never opens a data dir, so it works beside a "
                    "running service).")
    spark.add_argument("topic")
    spark.add_argument("partitions", type=int, nargs="*", metavar="PARTITION",
                       help="partitions to clean (default: every partition of the topic)")
    spark.add_argument("--master", default=None,
                       help="Spark master URL, standalone only (default: the spark_master option, else local[*])")
    _add_server_flags(spark)
    _add_option_flags(spark.add_argument_group("without --server: the stores to open (no data dir is opened)"),
                      (*DATA_DIR_OPTIONS, "spark_master", "spark_conf", "spark_ship_packages",
                       "spark_split_partition_bytes"))

    report = _partition_parser(
        sub, "report", help="print a partition's compaction rounds, newest first",
        description="Print the reports of a partition's compaction rounds (local, tiered and Spark; completed, "
                    "failed, aborted or fenced), newest first: per segment the action taken, records removed by "
                    "reason, bytes in and out, downloads, uploads and requests. With --server URL it asks a running "
                    "service; without, it reads the metadata store itself (safe beside a running service).")
    report.add_argument("--limit", type=int, default=20, help="most rounds to print (default 20)")
    report.add_argument("--before", metavar="ROUND_ID", default=None,
                        help="only rounds recorded before this one (page back)")
    report.add_argument("--json", action="store_true", help="print the rounds as JSON (GET .../compactions' shape)")
    _add_server_flags(report)
    _add_option_flags(report.add_argument_group("without --server: the stores to open"), DATA_DIR_OPTIONS)

    erase = sub.add_parser(
        "erase", allow_abbrev=False, help="erase keys by a deadline and print the receipt",
        description="Append a tombstone for each KEY and erase the keys' older values from local disk and the "
                    "object store by the deadline; prints the receipt (JSON). --wait drives the erasure (or, with "
                    "--server URL, waits for the running service) until its values are removed.")
    erase.add_argument("topic")
    erase.add_argument("keys", nargs="+", metavar="KEY")
    erase.add_argument("--partition", dest="partitions", type=int, action="append", default=None,
                       help="a partition to erase from (repeatable; default every partition)")
    erase.add_argument("--deadline-ms", type=int, default=None, help="deadline, epoch milliseconds")
    erase.add_argument("--base64", action="store_true", help="the keys are base64")
    erase.add_argument("--wait", action="store_true", help="wait until the values are removed (or the erasure "
                                                          "failed), up to --wait-timeout")
    erase.add_argument("--wait-timeout", type=float, default=600.0, help="seconds --wait waits at most (default 600)")
    _add_server_flags(erase)
    _add_option_flags(erase.add_argument_group("without --server: the data dir and stores to open"),
                      DATA_DIR_OPTIONS)

    delete = _partition_parser(
        sub, "delete-records", help="delete a partition's records below an offset (Kafka's DeleteRecords)",
        description="Delete the partition's records below OFFSET (-1: the high watermark), as Kafka's "
                    "DeleteRecords (kafka-delete-records.sh): reads below the new log start offset answer "
                    "OFFSET_OUT_OF_RANGE at once, and the next retention pass removes the segments wholly below "
                    "it, local and remote. Only for topics whose cleanup.policy contains delete (compacted records "
                    "go by tombstones and `erase`). Prints {\"log_start_offset\": N}. With --server URL the running "
                    "service does it; without, the command opens the data dir itself (the service must be "
                    "stopped).")
    delete.add_argument("offset", type=int, help="the new log start offset; -1 for the high watermark")
    _add_server_flags(delete)
    _add_option_flags(delete.add_argument_group("without --server: the data dir and stores to open"),
                      DATA_DIR_OPTIONS)

    demo = sub.add_parser("demo", allow_abbrev=False, help="a self-contained tour: produce, tier, compact, read back")
    demo.add_argument("--records", type=int, default=20_000, help="records to produce (default 20000)")
    demo.add_argument("--keys", type=int, default=1_000, help="distinct keys (default 1000)")
    demo.add_argument("--dir", type=Path, default=None, help="data dir to use (default: a temporary one)")
    demo.add_argument("--seed", type=int, default=42, help="random seed of the workload")

    dump = sub.add_parser("dump-log", allow_abbrev=False, help="print the batches of segment files (like kafka-dump-log)")
    dump.add_argument("paths", nargs="+", type=Path, metavar="PATH",
                      help=".log, .index, .timeindex, .txnindex, .snapshot or leader-epoch-checkpoint file, local "
                           "or a remote segment's object (<offset>-<segment id>.<type>)")
    dump.add_argument("--print-records", action="store_true", help="print every record too")

    docs = sub.add_parser("config-docs", allow_abbrev=False, help="print the topic configuration reference (Markdown)")
    docs.add_argument("--service", action="store_true", help="print the service options table instead")
    return parser


def cmd_serve(args: argparse.Namespace) -> int:
    from service.app import create_app
    from service.node import Node
    from service.server import serve_in_foreground

    config = _load(args)
    logging.basicConfig(level=config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from service.malloc_tuning import tune_malloc

    tune_malloc(config.malloc_mmap_threshold_bytes)  # before the node allocates its buffers
    node = Node(config)
    companions: list[Any] = []
    if config.kafka_port:  # the Kafka listener beside the HTTP API, over the same node
        from service.kafka.server import KafkaService

        companions.append(KafkaService(node, config))
    from service.heap import StartupHeapFreeze

    companions.append(StartupHeapFreeze(node))  # last: start-up is done (service/heap.py)
    app = create_app(node, manage_lifecycle=True, companions=companions)
    # SIGTERM/SIGINT: a graceful stop within 10 s (the app's lifespan shuts the node down), exit 0
    return serve_in_foreground(app, host=config.host, port=config.port, log_level=config.log_level)


class ServerError(Exception):
    """The service answered an error, or could not be reached (the message says which)."""


def _server_request(args: argparse.Namespace, method: str, path: str, body: Any = None) -> Any:
    """One JSON request to the service at ``--server``; its ``{"error": ...}`` becomes ServerError."""
    base = args.server.rstrip("/")
    if urllib.parse.urlparse(base).scheme not in ("http", "https"):
        raise ServiceConfigError(f"--server {args.server!r} is not an http:// or https:// URL")
    token = args.token if args.token is not None else os.environ.get("TIERCOMPACT_TOKEN")
    headers = {"Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token.strip()}"
    data = b"" if method == "POST" else None
    if body is not None:
        headers["Content-Type"] = "application/json"
        data = json.dumps(body).encode("utf-8")
    req = urllib.request.Request(base + path, method=method, headers=headers, data=data)
    try:
        with urllib.request.urlopen(req, timeout=args.timeout) as resp:  # noqa: S310 - URL checked above
            return json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as e:
        body = e.read()
        try:
            message = json.loads(body)["error"]
        except (ValueError, KeyError, TypeError):
            message = body.decode("utf-8", "replace").strip() or e.reason
        raise ServerError(f"{base} answered {e.code}: {message}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise ServerError(f"cannot reach the tiercompact service at {base} ({reason}); check --server, or run "
                          f"without it to open the data dir directly (with the service stopped)") from None


def _check_server_flags(args: argparse.Namespace) -> None:
    if args.server is None:
        return
    local = [f"--{n.replace('_', '-')}" for n in DATA_DIR_OPTIONS if getattr(args, n, None) is not None]
    if args.config is not None:
        local.insert(0, "--config")
    if local:
        raise ServiceConfigError(f"{', '.join(local)} configure a data dir opened locally; with --server the "
                                 f"service uses its own: drop them, or drop --server")


def _open_local_node(args: argparse.Namespace, what: str, usage: str) -> Node | None:
    """The Node over the configured data dir, for a command run without ``--server``; None (after
    a hint to send the ``what`` to the service with ``tiercompact {usage} --server``) when a running
    service owns the data dir."""
    from service.node import Node

    config = _load(args)
    _check_data_dir(config)
    logging.basicConfig(level=config.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    try:
        return Node(config)
    except DataDirInUseError as e:
        print(f"error: {e}", file=sys.stderr)
        print(f"hint: a running tiercompact service owns this data dir; send the {what} to it with\n"
              f"  tiercompact {usage} --server http://HOST:PORT [--token TOKEN]", file=sys.stderr)
        return None


def _check_data_dir(config: ServiceConfig) -> None:
    d = config.data_dir
    if d.exists() and not d.is_dir():
        raise ServiceConfigError(f"--data-dir {d} is not a directory; point it at the service's data dir "
                                 f"(it holds topics.json and the <topic>-<partition> directories)")


def cmd_clean(args: argparse.Namespace) -> int:
    """One cleaning pass: through the service with ``--server``, else on the data dir directly
    (without the service's threads; the service must be stopped, as two processes must not own
    one data dir)."""
    _check_server_flags(args)
    if args.server is not None:
        topic = urllib.parse.quote(args.topic, safe="")
        path = f"/v1/topics/{topic}/partitions/{args.partition}/clean"
        if args.dry_run:
            _print_json(_server_request(args, "POST", f"{path}?dry_run=true"))
            return 0
        deadline = time.monotonic() + args.timeout
        wait_s = max(1.0, min(60.0, args.timeout / 2))
        out = _server_request(args, "POST", f"{path}?wait=true&timeout_s={wait_s:g}")
        if not (isinstance(out, dict) and "job_id" in out):
            _print_json(out)  # the round's stats
            return 0
        # the round outlived the service's wait: it goes on as a job, followed here up to --timeout
        job = out
        while job.get("state") not in ("succeeded", "failed") and time.monotonic() < deadline:
            time.sleep(1.0)
            job = _server_request(args, "GET", f"/v1/jobs/{out['job_id']}")
        _print_json(job)
        return 0 if job.get("state") == "succeeded" else 1
    node = _open_local_node(args, "clean", f"clean {args.topic} {args.partition}")
    if node is None:
        return 1
    with node:
        if args.dry_run:
            from cleaner.dry_run import dry_run

            _print_json(dry_run(node.cleaner, node.log(args.topic, args.partition).topic_partition))
        else:
            _print_json(node.clean(args.topic, args.partition))
    return 0


def cmd_delete_records(args: argparse.Namespace) -> int:
    """Kafka's DeleteRecords on one partition: through the service with ``--server``, else on the data dir directly."""
    _check_server_flags(args)
    if args.offset < -1:
        raise ServiceConfigError(f"offset {args.offset} is invalid: give an offset >= 0, or -1 for the high watermark")
    if args.server is not None:
        topic = urllib.parse.quote(args.topic, safe="")
        _print_json(_server_request(args, "POST", f"/v1/topics/{topic}/partitions/{args.partition}/delete-records",
                                    {"offset": args.offset}))
        return 0
    node = _open_local_node(args, "delete-records",
                            f"delete-records {args.topic} {args.partition} {args.offset}")
    if node is None:
        return 1
    with node:
        _print_json({"log_start_offset": node.delete_records(args.topic, args.partition, args.offset)})
    return 0


def cmd_spark_clean(args: argparse.Namespace) -> int:
    """Offload a clean of the topic's tiered partitions to Spark: through the service with
    ``--server`` (it submits to its Spark master and adopts the result), else standalone: the
    driver runs here against the metadata store and the object store, never a data dir."""
    _check_server_flags(args)
    if args.server is not None:
        if args.master is not None:
            raise ServiceConfigError("--master is the standalone driver's: with --server the service submits to "
                                     "its own spark_master; drop one of them")
        topic = urllib.parse.quote(args.topic, safe="")
        query = urllib.parse.urlencode([("wait", "true"), *(("partitions", str(p)) for p in args.partitions)])
        job = _server_request(args, "POST", f"/v1/topics/{topic}/spark-clean?{query}")
        _print_json(job)
        outcomes = (job.get("stats") or {}).get("partitions", [])
        return 0 if job.get("state") == "succeeded" and all(
            o.get("status") in ("cleaned", "nothing-to-clean") for o in outcomes) else 1
    from cleaner.spark.job import SparkCleanJob, spark_session
    from log.types import TopicPartition
    from metadata import load_metadata_manager
    from service.config import store_options
    from service.spark_offload import clean_config

    config = _load(args)
    logging.basicConfig(level=config.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    with load_metadata_manager(config.metadata_url, lock_timeout_ms=config.metadata_lock_timeout_ms,
                               statement_timeout_ms=config.metadata_statement_timeout_ms) as rlmm:
        stored = rlmm.get_topic_config(args.topic)
        if stored is None:
            raise ServiceConfigError(
                f"unknown topic {args.topic!r}: the metadata store {config.metadata_url.split('@')[-1]} holds no "
                f"config for it. Point --metadata at the store the service uses (topics created before configs "
                f"were shared appear once the service restarts on that store)")
        parts = args.partitions or list(range(stored.partitions))
        bad = [p for p in parts if not 0 <= p < stored.partitions]
        if bad:
            raise ServiceConfigError(f"topic {args.topic!r} has {stored.partitions} partitions; {bad} do not exist")
        tps = [TopicPartition(args.topic, p) for p in parts]
        opts = store_options(config)
        with spark_session(clean_config(config, master=args.master)) as spark:
            job = SparkCleanJob(spark, rlmm=rlmm, store_url=config.remote_url, store_options=opts,
                                views=SparkCleanJob.standalone_views(rlmm, config.remote_url, opts),
                                broker_id=config.broker_id)
            outcomes = job.run(tps)
    _print_json([o.as_dict() for o in outcomes.values()])
    return 0 if all(o.status in ("cleaned", "nothing-to-clean") for o in outcomes.values()) else 1


def cmd_report(args: argparse.Namespace) -> int:
    """The partition's round reports: from the service with ``--server``, else from the metadata
    store named by the options (reading it needs no data-dir lock)."""
    _check_server_flags(args)
    if not 1 <= args.limit <= 1000:
        raise ServiceConfigError(f"--limit {args.limit} must be 1..1000")
    if args.server is not None:
        topic = urllib.parse.quote(args.topic, safe="")
        query = {"limit": str(args.limit)}
        if args.before is not None:
            query["before"] = args.before
        rounds = _server_request(args, "GET", f"/v1/topics/{topic}/partitions/{args.partition}/compactions?"
                                 + urllib.parse.urlencode(query))
    else:
        from log.types import TopicPartition
        from metadata import load_metadata_manager

        config = _load(args)
        with load_metadata_manager(config.metadata_url) as rlmm:
            rounds = [r.as_dict() for r in rlmm.list_compaction_reports(
                TopicPartition(args.topic, args.partition), limit=args.limit, before=args.before)]
    if args.json:
        _print_json(rounds)
    else:
        print(format_rounds(rounds, f"{args.topic}-{args.partition}", more=len(rounds) >= args.limit), end="")
    return 0


def cmd_erase(args: argparse.Namespace) -> int:
    """Erase keys: through the service with ``--server``, else on the data dir directly
    (the service must be stopped); prints the receipt. Exit 1 if --wait ends unfinished or failed."""
    import time

    _check_server_flags(args)
    body: dict[str, Any] = {"keys": args.keys, "encoding": "base64" if args.base64 else "utf-8"}
    if args.partitions is not None:
        body["partitions"] = args.partitions
    if args.deadline_ms is not None:
        body["deadline_ms"] = args.deadline_ms
    done = ("values_removed", "complete", "failed")
    deadline = time.monotonic() + args.wait_timeout
    if args.server is not None:
        topic = urllib.parse.quote(args.topic, safe="")
        accepted = _server_request(args, "POST", f"/v1/topics/{topic}/erasures", body)
        path = f"/v1/erasures/{accepted['erasure_id']}"
        receipt = _server_request(args, "GET", path)
        while args.wait and receipt["state"] not in done and time.monotonic() < deadline:
            time.sleep(0.5)
            receipt = _server_request(args, "GET", path)
    else:
        from service.fields import decode_field

        node = _open_local_node(args, "erasure", f"erase {args.topic} KEY...")
        if node is None:
            return 1
        with node:
            keys = [decode_field(k, body["encoding"], f"KEY {k!r}") for k in args.keys]
            rec = node.erasures.create(args.topic, [k for k in keys if k is not None], encoding=body["encoding"],
                                       partitions=args.partitions, deadline_ms=args.deadline_ms)
            while args.wait and rec.state not in done and time.monotonic() < deadline:
                node.erasures.run_once()
                rec = node.erasures.get(rec.erasure_id)
                if rec.state not in done:
                    time.sleep(0.2)
            receipt = node.erasures.receipt(rec)
    _print_json(receipt)
    return 1 if args.wait and receipt["state"] not in ("values_removed", "complete") else 0


def format_rounds(rounds: list[dict[str, Any]], partition: str, *, more: bool = True) -> str:
    """Round reports (GET .../compactions' items) as text for a person; ``more``: the page was full, so older rounds
    may follow (the hint how to page is printed only then)."""
    if not rounds:
        return f"{partition}: no compaction rounds recorded\n"

    def removed(d: dict[str, int]) -> str:
        return ", ".join(f"{k} {v}" for k, v in d.items())

    lines = []
    for r in rounds:
        after = r["checkpoint_after"] if r["checkpoint_after"] is not None else "-"
        lines.append(f"round {r['round_id']}  {r['engine']}  epoch {r['leader_epoch']}  {r['outcome']}  "
                     f"started {r['started_ms']}  {r['ended_ms'] - r['started_ms']} ms  "
                     f"checkpoint {r['checkpoint_before']} -> {after}")
        if r.get("error"):
            lines.append(f"  error: {r['error']}")
        lines.append(f"  removed: {removed(r['removed'])}; bytes in {r['bytes_in']} out {r['bytes_out']}; "
                     f"downloaded {r['downloaded']} uploaded {r['uploaded']}; {r['requests']} requests")
        for s in r["segments"]:
            lines.append(f"  {s['action']:<20} {s['segment_id']} [{s['base_offset']}..{s['end_offset']}]  "
                         f"removed {removed(s['removed'])}; in {s['bytes_in']} out {s['bytes_out']}; "
                         f"down {s['downloaded']} up {s['uploaded']}; {s['requests']} requests")
    if more:
        lines.append(f"(older rounds: --before {rounds[-1]['round_id']})")
    return "\n".join(lines) + "\n"


def cmd_demo(args: argparse.Namespace) -> int:
    from service.demo import run_demo

    logging.basicConfig(level="WARNING", format="%(levelname)s %(name)s: %(message)s")
    if args.records < 1 or args.keys < 1:
        print("error: --records and --keys must be at least 1", file=sys.stderr)
        return 2
    report = run_demo(args.records, args.keys, args.dir, seed=args.seed)
    return 0 if report["ok"] else 1


def cmd_dump_log(args: argparse.Namespace) -> int:
    from service.dump import dump_file

    ok = True
    for path in args.paths:
        if not path.is_file():
            print(f"error: {path} is not a file", file=sys.stderr)
            ok = False
            continue
        try:
            ok = dump_file(path, print, print_records=args.print_records) and ok
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            ok = False
    return 0 if ok else 1


def cmd_config_docs(args: argparse.Namespace) -> int:
    from log.config import config_reference_markdown

    print(options_reference_markdown() if args.service else config_reference_markdown(), end="")
    return 0


COMMANDS = {"serve": cmd_serve, "clean": cmd_clean, "delete-records": cmd_delete_records,
            "spark-clean": cmd_spark_clean, "demo": cmd_demo, "dump-log": cmd_dump_log, "config-docs": cmd_config_docs, "report": cmd_report, "erase": cmd_erase}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except ServiceConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (TiercompactError, ServerError) as e:
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # the reader went away (`tiercompact dump-log ... | head`): stop quietly, as a tool
        # killed by SIGPIPE would, and keep the interpreter's final flush from complaining
        _silence_stdout()
        return EXIT_SIGPIPE
    except OSError as e:  # a path that is not what it should be (a file as --data-dir's parent, ...)
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout without a file descriptor (captured in tests)
        pass


def _print_json(doc: Any) -> None:
    print(json.dumps(doc, indent=2, sort_keys=True, default=str))


if __name__ == "__main__":
    sys.exit(main())
