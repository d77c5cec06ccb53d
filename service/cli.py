"""The ``tiercompact`` console script: serve, demo, clean, spark-clean, dump-log, config-docs.

Every ServiceConfig option is a flag of ``serve`` and ``clean`` (``--data-dir``,
``--remote``, ...); flags override ``TIERCOMPACT_*`` environment variables, which
override the config file, which overrides the defaults (see service/config.py).
Exit codes: 0 success, 1 the operation failed (a corrupt segment, a failed clean),
2 bad usage or configuration.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from log.errors import TiercompactError
from service.config import ServiceConfig, ServiceConfigError, load_config, options_reference_markdown


def _add_option_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help="TOML (or .json) config file")
    for name, f in ServiceConfig.model_fields.items():
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tiercompact", allow_abbrev=False,
                                     description="Kafka-style log compaction for tiered logs.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub.add_parser("serve", allow_abbrev=False, help="run the HTTP admin API and background cleaning/tiering")
    _add_option_flags(serve)

    clean = sub.add_parser("clean", allow_abbrev=False, help="run one cleaning pass on a partition and print its stats (JSON)")
    clean.add_argument("topic")
    clean.add_argument("partition", type=int)
    _add_option_flags(clean)

    spark = sub.add_parser("spark-clean", help="clean the remote tier of partitions with one Spark job (JSON)")
    spark.add_argument("topic")
    spark.add_argument("partitions", type=int, nargs="*", metavar="PARTITION",
                       help="partitions to clean (default: every partition of the topic)")
    spark.add_argument("--master", default="local[*]", help="Spark master URL (default local[*])")
    _add_option_flags(spark)

    demo = sub.add_parser("demo", allow_abbrev=False, help="a self-contained tour: produce, tier, compact, read back")
    demo.add_argument("--records", type=int, default=20_000, help="records to produce (default 20000)")
    demo.add_argument("--keys", type=int, default=1_000, help="distinct keys (default 1000)")
    demo.add_argument("--dir", type=Path, default=None, help="data dir to use (default: a temporary one)")
    demo.add_argument("--seed", type=int, default=42, help="random seed of the workload")

    dump = sub.add_parser("dump-log", allow_abbrev=False, help="print the batches of segment files (like kafka-dump-log)")
    dump.add_argument("paths", nargs="+", type=Path, metavar="PATH",
                      help=".log, .index, .timeindex or .txnindex file")
    dump.add_argument("--print-records", action="store_true", help="print every record too")

    docs = sub.add_parser("config-docs", allow_abbrev=False, help="print the topic configuration reference (Markdown)")
    docs.add_argument("--service", action="store_true", help="print the service options table instead")
    return parser


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from service.app import create_app
    from service.node import Node

    config = _load(args)
    logging.basicConfig(level=config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    node = Node(config)
    app = create_app(node, manage_lifecycle=True)
    # uvicorn turns SIGTERM/SIGINT into a graceful stop; the app's lifespan then shuts the node down.
    uvicorn.run(app, host=config.host, port=config.port, log_level=config.log_level, access_log=False)
    return 0


def cmd_clean(args: argparse.Namespace) -> int:
    """A pass on the data dir without starting the service's threads (stop `serve` first:
    two processes must not own one data dir)."""
    from service.node import Node

    config = _load(args)
    logging.basicConfig(level=config.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    with Node(config) as node:
        _print_json(node.clean(args.topic, args.partition))
    return 0


def cmd_spark_clean(args: argparse.Namespace) -> int:
    """Offload a clean of the topic's tiered partitions to Spark (stop `serve` first, as for `clean`)."""
    from cleaner.spark.job import SparkCleanConfig, SparkCleanJob, spark_session
    from log.types import TopicPartition
    from service.node import Node

    config = _load(args)
    logging.basicConfig(level=config.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    with Node(config) as node:
        topic = node.topic(args.topic)
        tps = [TopicPartition(topic.name, p) for p in (args.partitions or range(topic.partitions))]
        for tp in tps:
            node.log(tp.topic, tp.partition)  # unknown partitions fail before Spark starts
        with spark_session(SparkCleanConfig(master=args.master)) as spark:
            manager = node.cleaner.manager
            job = SparkCleanJob(spark, logs=node.log_manager.get_log, rlmm=node.metadata,
                                store_url=config.remote_url, store_options=node.store_options(),
                                leader_epoch=node.remote.leader_epoch,
                                checkpoint=lambda tp: manager.all_cleaner_checkpoints().get(tp),
                                write_checkpoint=lambda tp, off: manager.update_checkpoints(add=(tp, off)),
                                broker_id=config.broker_id, clock=node.clock)
            outcomes = job.run(tps)
    _print_json([o.as_dict() for o in outcomes.values()])
    return 0 if all(o.status in ("cleaned", "nothing-to-clean") for o in outcomes.values()) else 1


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


COMMANDS = {"serve": cmd_serve, "clean": cmd_clean, "spark-clean": cmd_spark_clean, "demo": cmd_demo,
            "dump-log": cmd_dump_log, "config-docs": cmd_config_docs}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except ServiceConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except TiercompactError as e:
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _print_json(doc: Any) -> None:
    print(json.dumps(doc, indent=2, sort_keys=True, default=str))


if __name__ == "__main__":
    sys.exit(main())
