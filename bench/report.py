"""The measured figures of docs/benchmarks.md and the README's short table, generated from bench/results/*.json.

``python -m bench.report`` prints the full tables; ``python -m bench.report --write`` replaces
the section between docs/benchmarks.md's ``<!-- bench:begin -->`` / ``<!-- bench:end -->``
markers with them and the README's ``<!-- bench-summary:begin -->`` section with
:func:`summary`. A missing result file is reported as such rather than invented.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from bench.common import RESULTS

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BENCHMARKS = ROOT / "docs" / "benchmarks.md"


def _load(name: str) -> dict[str, Any] | None:
    p = RESULTS / f"{name}.json"
    return json.loads(p.read_text()) if p.exists() else None


def _n(x: float, digits: int = 0) -> str:
    return f"{x:,.{digits}f}"


def _mb(b: float) -> str:
    return f"{b / 1e6:,.1f} MB"


def _scale(doc: dict[str, Any]) -> str:
    return " (quick run)" if doc.get("quick") else ""


def _format() -> list[str]:
    d = _load("format")
    out = ["**Log append/read** (`bench format`): LocalLog with 16-byte keys and 100-byte values, "
           "1000-record batches" + (_scale(d) if d else "") + "."]
    if d is None:
        return out + ["", "_not measured yet_"]
    out += ["", "| codec | records | append rec/s | append MB/s | read rec/s | read MB/s | kafka-python build rec/s | "
            "kafka-python parse rec/s |", "|---|---|---|---|---|---|---|---|"]
    for codec, r in d["results"].items():
        out.append(f"| {codec} | {_n(r['records'])} | {_n(r['append_records_per_s'])} | {r['append_mb_per_s']} | "
                   f"{_n(r['read_records_per_s'])} | {r['read_mb_per_s']} | {_n(r['kafka_python_build_records_per_s'])} | "
                   f"{_n(r['kafka_python_parse_records_per_s'])} |")
    return out


def _cleaner() -> list[str]:
    d = _load("cleaner")
    out = ["**Local cleaner** (`bench cleaner`): 1M records, 100k keys, 100-byte values, one cleaning round "
           "(CompactOffsetMap, compiled kernels, 128 MiB dedupe buffer); wall time, beside a read+CRC ceiling "
           "(`bench fastpath` below gives the CPU-second view)."]
    if d is None:
        return out + ["", "_not measured yet_"]
    res = d.get("results", d)
    out += ["", "| codec | records/s | MB/s | clean s | map phase s | read+CRC ceiling MB/s | offset map bytes/slot | "
            "peak RSS MB |", "|---|---|---|---|---|---|---|---|"]
    for codec in ("none", "lz4"):
        r = res.get(codec)
        if not r:
            continue
        out.append(f"| {codec} | {_n(r['clean_records_per_sec'])} | {r['clean_mb_per_sec']} | {r['clean_secs']} | "
                   f"{r['map_phase_secs']} | {_n(r['ceiling_read_crc_mb_per_sec'])} | "
                   f"{res.get('offset_map_bytes_per_entry', d.get('offset_map_bytes_per_entry', 24))} | "
                   f"{res.get('peak_rss_mb', d.get('peak_rss_mb', '?'))} |")
    return out


def _fastpath() -> list[str]:
    d = _load("fastpath")
    out = ["**Compiled record kernels** (`bench fastpath`): one local cleaning round, 16-byte keys over 100k keys, "
           "random values, 1000-record batches, 128 MiB dedupe buffer" + (_scale(d) if d else "") + ". Figures per "
           "CPU second of the process (`time.process_time`): the 2 cores are shared with other jobs, so wall time "
           "is noise. The ceiling is read + CRC-32C + decompress + one keyed SipHash per key over the same bytes."
           + (" The round runs as on a node: the segment it replaces is deleted later by the node's scheduler "
              "(`file.delete.delay.ms`), not inside the round; MB counts the source bytes cleaned, including "
              "runs of wholly superseded batches the rewriting pass deletes without reading them again."
              if d and d.get("deferred_deletion") else "")]
    if d is None:
        return out + ["", "_not measured yet_"]
    out += ["", "| values | codec | records | compiled MB/CPU-s | compiled records/CPU-s | ceiling MB/CPU-s | "
            "vs ceiling | pure-Python reference MB/CPU-s | map MiB allocated | peak RSS MB | load (1 min) |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in d["results"]:
        c = r["compiled"]
        ref = r.get("reference")
        out.append(f"| {r['value_bytes']} B | {r['codec']} | {_n(r['records'])} | {c['mb_per_cpu_s']} | "
                   f"{_n(c['records_per_cpu_s'])} | {_n(r['ceiling']['mb_per_cpu_s'], 1)} | "
                   f"{r['compiled_vs_ceiling']} | {ref['mb_per_cpu_s'] if ref else '-'} | "
                   f"{(c['map_bytes_allocated'] + c.get('map_bitmap_bytes', 0)) / 2**20:.1f} | {r['peak_rss_mb']} | "
                   f"{r.get('load_average_1min_at_start', '-')} |")
    t = d.get("targets")
    if t:
        out += ["", "Targets: " + "; ".join(
            f"{name}: {v['value']:,} ({'met' if v['met'] else 'not met'})" for name, v in t.items())
            + ". Each round follows one untimed warm-up round in the same process."]
    m = d["offset_map"]
    out += ["", f"Offset map: {m['compact_slot_bytes']}-byte slots, {m['compact_bytes_per_usable_entry']} bytes "
                f"per usable entry at load factor {m['load_factor']} ({_n(m['compact_keys_per_mib'])} keys per MiB "
                f"of dedupe buffer; SkimpyOffsetMap: {m['skimpy_slot_bytes']}-byte slots, "
                f"{m['skimpy_bytes_per_usable_entry']} bytes, {_n(m['skimpy_keys_per_mib'])} keys); map MiB "
                f"allocated counts the slots the table grew to plus its bitmap of the offsets mapped (2 bits "
                f"each), which lets the rewriting pass decide a mapped record without hashing its key again. "
                f"The rewriting pass does not recompute the CRC of bytes the map pass checked in the same round "
                f"(the clean head is checked in full). Key hash: "
                f"{d['key_hash']}. The 100 B rows also ran today's pure-Python path (the reference column) and "
                f"the pure-Python kernels on copies of the same log (output identical: "
                f"{all(r.get('identical_output', False) for r in d['results'] if 'reference' in r)}). A row's peak "
                f"RSS includes the reference run's 128 MiB SkimpyOffsetMap where there is one."]
    h = d.get("key_hash_ns_per_16_byte_key")
    if h:
        out += ["", f"Key hash cost per 16-byte key: SipHash-2-4-128 {h['siphash128_in_compiled_scan']} ns inside the "
                    f"compiled scan; per Python call {h['siphash128_python_call']} ns (SipHash) and "
                    f"{h['md5_python_call']} ns (MD5, what SkimpyOffsetMap pays per key)."]
    return out


def _remote() -> list[str]:
    d = _load("remote")
    out = ["**Object stores and metadata** (`bench remote`): 64 MiB in 8 MiB objects; SQLite file."]
    if d is None:
        return out + ["", "_not measured yet_"]
    out += ["", "| store | upload MB/s | 1 MiB ranged read MB/s | full download MB/s |", "|---|---|---|---|"]
    for key, label in (("file", "file://"), ("s3_moto_http", "S3 (moto HTTP), single PUT"),
                       ("s3_moto_http_multipart_5mib_parts", "S3 (moto HTTP), multipart")):
        r = d.get(key)
        if r:
            out.append(f"| {label} | {r['upload_mb_s']} | {r['ranged_read_1mib_mb_s']} | {r['full_download_mb_s']} |")
    m = d.get("metadata_sqlite_file")
    if m:
        out += ["", f"Metadata on SQLite: {m['add_and_finish_per_s']} segment add+finish/s, "
                    f"{m['publish_compaction_per_s']} fenced publish_compaction/s, "
                    f"{m['list_per_s']} lists of {m['list_returned_segments']} segments/s."]
    return out


def _tiered() -> list[str]:
    d = _load("tiered")
    if d is None:
        return ["**Tiered round** (`bench tiered`): _not measured yet_"]
    w = d["workload"]
    out = [f"**Tiered round** (`bench tiered`){_scale(d)}: {w['keys']:,} keys written in key order, copied to "
           f"moto's S3 server over HTTP ({_mb(w['segment_bytes'])} segments) and marked clean, then one update to "
           f"each of the first N keys; default configuration (bloom false-positive rate {w['fpp']:.0%}). "
           "Downloaded bytes include key index objects; the minimum is the dirty segments once plus the clean "
           "segments that really hold a superseded record. *key index*: bloom filter then exact key index, with "
           "the read cache as the node's copies left it (each copy writes its key index through to it); *after "
           "restart*: the same round on a node restarted on that disk (the read cache persists and is re-adopted); "
           "*empty cache*: a node whose cache disk was lost (every index the bloom filter cannot rule out is "
           "fetched); *bloom only*: the behaviour before key indexes. Wall time is noisy (2 shared cores).",
           "", "| values | dirty keys | segments | minimum | key index: downloaded | segments fetched | skipped by "
           "bloom / key index | requests | wall s | after restart: downloaded | requests | empty cache: "
           "downloaded | bloom only: downloaded | key index size |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in d["results"].items():  # "<value bytes>B_values_<N>_dirty_keys"
        p, k, b = r["partition"], r["key_index"], r.get("bloom_only")
        a, e = r.get("key_index_after_restart"), r.get("key_index_empty_cache", r.get("key_index_cold_cache"))
        value = f"{int(name.split('B_', 1)[0]):,} B"
        before = f"{_mb(b['bytes_downloaded'])} ({b['downloaded_over_minimum']}x)" if b else "-"
        restart = (f"{_mb(a['bytes_downloaded'])} ({a['downloaded_over_minimum']}x) | "
                   f"{a['object_store_requests_total']}") if a else "- | -"
        empty = f"{_mb(e['bytes_downloaded'])} ({e['downloaded_over_minimum']}x)" if e else "-"
        out.append(f"| {value} | {p['dirty_keys']:,} | {p['base_segments']} + {p['dirty_segments']} | "
                   f"{_mb(p['min_download_bytes'])} | {_mb(k['bytes_downloaded'])} ({k['downloaded_over_minimum']}x) "
                   f"| {k['segments_downloaded']} | {k['segments_skipped_by_bloom']} / "
                   f"{k['segments_skipped_by_key_index']} | {k['object_store_requests_total']} | {k['wall_s']} | "
                   f"{restart} | {empty} | {before} | {p['key_index_share_of_segment_bytes']:.2%} |")
    plan = d.get("planning")
    if plan:
        out += ["", f"Planning a round over {plan['segments']:,} remote segments ({plan['keys_per_segment']:,} keys "
                    f"each; {plan['dirty_keys']:,} exact dirty keys, {plan['segments_holding_a_dirty_key']} segments "
                    "holding one; SQLite metadata, bloom filters read in batches, key indexes in the read cache, no "
                    f"object-store read): {plan['warm']['wall_s']} s ({plan['warm']['cpu_s']} CPU-s), after a restart "
                    f"{plan['after_restart']['wall_s']} s (the cache's {plan['after_restart_adopted_entries']:,} "
                    f"entries re-adopted); load average {plan['load_avg_1m']} on 2 cores."]
    return out


def _spark() -> list[str]:
    d = _load("spark")
    if d is None:
        return ["**Spark offload** (`bench spark`): _not measured yet_"]
    variants = d.get("variants") or {"disk": d}
    out = [f"**Spark offload** (`bench spark`){_scale(d)}: {d['partitions']} partitions, {_mb(d['remote_bytes'])} "
           f"in {d['remote_segments']} remote segments (file:// store), one round each, best of "
           f"{d.get('repeats', 1)} runs per engine on fresh copies; output identical across every run: "
           f"{all(v['identical_remote_segments'] for v in variants.values())}. Wall time excludes the Spark "
           "session start. *memory*: every file on tmpfs (the engines themselves: a cluster's executors have their "
           "own disks and the object store scales out); *disk*: the same on the VM's one disk.",
           "", "| files | engine | wall s | MB/s | downloaded | uploaded | all runs, wall s |",
           "|---|---|---|---|---|---|---|"]
    for name, v in variants.items():
        for key, r in v["results"].items():
            label = r.get("master", key.replace("_", " "))
            out.append(f"| {name} | {label} | {r['wall_seconds']} | {r['mb_per_second']} | "
                       f"{_mb(r['bytes_downloaded'])} | {_mb(r['bytes_uploaded'])} | "
                       f"{', '.join(str(x) for x in r.get('runs_wall_seconds', [r['wall_seconds']]))} |")
    lines = []
    for name, v in variants.items():
        res = v["results"]
        one, two, inproc = (res[k]["wall_seconds"] for k in ("spark_local_1", "spark_local_2", "in_process"))
        met = ("met" if one / two >= 1.7 else "not met", "met" if inproc / two > 1 else "not met")
        load = v.get("load_avg_1m_before_after") or ["?", "?"]
        lines.append(f"{name}: `local[2]` is {one / two:.2f}x `local[1]` (target 1.7x: {met[0]}) and "
                     f"{inproc / two:.2f}x the in-process cleaner (target > 1x: {met[1]}); load average {load[0]} "
                     f"before, {load[1]} after.")
    return out + ["", " ".join(lines) + " Every partition here runs whole: its round is one Spark task running "
                  "the in-process round's code (compiled kernels, no shuffle) on an executor, and the driver "
                  "publishes the results; `local[2]` runs two rounds at a time where the node's one tiered thread "
                  "runs one. What does not scale: the driver's planning, orphan sweep, publishing and reports "
                  "(serial, about 0.08 s for 8 partitions here, mostly SQL statements), the JVM's own CPU (0.14-0.17 "
                  "CPU-s a job here: on `local[1]` it runs on the idle second core, on `local[2]` it takes from the "
                  "rounds; measured, `local[2]` keeps both cores about 93% busy) and, on disk, the file store's fsyncs and the downloads of two "
                  "rounds on one device (two processes each cleaning half the partitions in process, no Spark, "
                  "take 1.5x less time than one doing all there, against 1.9x on tmpfs)."]


def _service() -> list[str]:
    d = _load("service")
    if d is None:
        return ["**Service** (`bench service`): _not measured yet_"]
    out: list[str] = []
    t = d.get("throughput")
    if t:
        out += [f"**HTTP throughput** (`bench service`){_scale(d)}: one `tiercompact serve` process, "
                f"{t['produce']['clients']} clients (keep-alive connections, each sending its next request when "
                f"the last is answered) from a load generator in a separate process, {t['produce']['records_per_request']} "
                f"records per request ({t['value_bytes']}-byte values) over {t['partitions']} partitions"
                + (" of a topic that keeps everything (no background cleaning competes with the requests)"
                   if "topic_config" in t else "") + ". Server CPU "
                f"per request is the steadier figure: the 2 cores are shared with other work, load average as "
                f"shown. Targets: {t['targets']['requests_per_sec']:,} requests/s, p99 <= {t['targets']['p99_ms']} ms.",
                "", "| request | requests/s | records/s | p50 ms | p99 ms | server CPU ms/request | server CPU share | "
                "load generator CPU share | load average (1 min) before / after |",
                "|---|---|---|---|---|---|---|---|---|"]
        verdicts = []
        for kind in ("produce", "read"):
            r = t[kind]
            out.append(f"| {kind} {r['records_per_request']} records | {_n(r['requests_per_sec'], 1)} | "
                       f"{_n(r['records_per_sec'])} | {r['p50_ms']} | {r['p99_ms']} | {r['server_cpu_ms_per_request']} | "
                       f"{r['server_cpu_share']} | {r.get('client_cpu_share', '-')} | "
                       f"{r['loadavg_before'][0]} / {r['loadavg_after'][0]} |")
            met = (r["requests_per_sec"] >= t["targets"]["requests_per_sec"]
                   and r["p99_ms"] <= t["targets"]["p99_ms"])
            verdicts.append(f"{kind} {'met' if met else 'not met'}")
        out += ["", f"Targets: {', '.join(verdicts)}.", ""]
    return out + [f"**Service under load** (`bench service`): {d['producer_threads']} producers + {d['reader_threads']} "
            f"readers on loopback for {d['duration_s']} s with cleaning and tiering in the background: "
            f"{d['requests']:,} requests, {d['requests_per_sec']} requests/s, p99 {d['p99_ms']} ms, "
            f"{d['failed_requests']} failed, {d['keys_lost_or_wrong']} keys lost or wrong"
            + (f"; the load generator runs in its own process against a `tiercompact serve` process, which "
               f"SIGTERM then stopped in {d['sigterm_stop_s']} s (exit status {d['sigterm_exit_code']})."
               if "sigterm_stop_s" in d else " (load generator and server share one Python process).")]


_KAFKA_PHASES = (("produce_1kib", "produce 1 KiB records"), ("produce_1kib_half_rate", "produce 1 KiB at half that rate"),
                 ("produce_1kib_half_rate_acks1", "the same half rate at acks=1 (no sync)"),
                 ("produce_1kib_half_rate_acks0", "the same half rate at acks=0 (the client's floor)"),
                 ("produce_100b", "produce 100 B records"), ("fetch_local", "consume from local segments"),
                 ("fetch_remote", "consume from remote segments"))


def _per_request(d: dict[str, Any]) -> str:
    """What the produce requests carried: librdkafka sends one ProduceRequest per partition batch."""
    per = {k.split("_")[0]: r["produce_1kib"] for k, r in d["results"].items() if "requests" in r["produce_1kib"]}
    if not per:
        return ""
    spread = " and ".join(f"about {_n(r['records'] / max(r['requests'], 1))} with {k}" for k, r in per.items())
    return (" librdkafka sends one ProduceRequest per partition batch, so the listener's fixed cost per request "
            "(decode, answer, the hand-off between the event loop and the connection's lane, the sync of what a "
            "lane job appended) is "
            f"spread over the records of one partition's batch: 1 KiB records a request at full rate, {spread} "
            "partition(s).")


def _content(d: dict[str, Any]) -> str:
    """What the records held, and how far lz4 shrank them on the wire."""
    ratios = [r["compression_ratio"] for res in d["results"].values() for r in res.values() if "compression_ratio" in r]
    if not ratios:
        return ""
    versions = d.get("client_versions")
    client = f" The client was confluent-kafka {versions['confluent_kafka']} (librdkafka {versions['librdkafka']})." \
        if versions else ""
    return (f"{client} lz4 shrank the produced records {min(ratios)} to "
            f"{max(ratios)}-fold on the wire (the server's BytesIn), so the server handled about half the bytes the MB "
            "figures count. The server's system CPU is mostly the page cache the appends write to and the fetches "
            "read through: on this virtual machine a page cache growing into memory the host took back costs several "
            "times what recycled pages do, which is why `serve` keeps only each partition's newest 64 MiB cached "
            "(docs/operations.md); that share still varies from run to run.")


def _kafka() -> list[str]:
    d = _load("kafka")
    if d is None:
        return ["**Kafka listener** (`bench kafka`): _not measured yet_"]
    t, m, met = d["targets"], d["measured"], d["targets_met"]
    out = [f"**Kafka listener** (`bench kafka`){_scale(d)}: one `tiercompact serve` process, {d['client']}, "
           f"{d['seconds_per_phase']} s a phase. Server CPU is the whole server process's while the phase runs "
           f"(its idle share, {d['server_idle_cpu_share']} of a core, included; the net figure takes it off); "
           "latencies are librdkafka's (`Message.latency()`, read in the delivery callback), from `produce()` to the "
           "acknowledgement's delivery report reaching the client's callback (acks=all waits for the sync: one "
           "syncfs of the data dir's file system for a job's partitions); in brackets the server's share, from a "
           "request's arrival to its answer (the bucket bounds of its Produce TotalTimeMs histogram), and the two "
           "parts librdkafka's statistics split a record's latency into, each second's p99 (the median second): "
           "its wait in the client's queue (`queue`, linger.ms included) and its request's round trip (`rtt`, the "
           "network and the server)."
           + _per_request(d) + _content(d),
           "", "| partitions | phase | MB/s | records/s | server CPU-s per GB | MB per server CPU-s (net of idle) "
           "| p50 / p99 ms (the server's share) | requests (server CPU µs a request) | server user / system CPU-s | load average before |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    spread: list[str] = []
    for key, res in d["results"].items():
        parts = key.split("_")[0]
        for phase, label in _KAFKA_PHASES:
            if phase not in res:  # a result file from before the phase was measured
                continue
            r = res[phase]
            lat = f"{r['p50_ms']} / {r['p99_ms']}" if "p99_ms" in r else "-"
            if r.get("server_p99_ms_at_most") is not None:
                lat += f" (server ≤ {r['server_p50_ms_at_most']:g} / ≤ {r['server_p99_ms_at_most']:g}"
                if r.get("round_trip_p99_ms") is not None:
                    lat += f"; queue {r['client_queue_p99_ms']}, rtt {r['round_trip_p99_ms']}"
                lat += ")"
            reqs = f"{_n(r['requests'])} ({_n(r['server_cpu_us_per_request'])})" if "requests" in r else "-"
            split = f"{r['server_user_s']} / {r['server_system_s']}" if "server_user_s" in r else "-"
            out.append(f"| {parts} | {label} | {_n(r['mb_per_s'], 1)} | {_n(r['records_per_s'])} | "
                       f"{_n(r['server_cpu_s_per_gb'], 1)} | {_n(r['mb_per_server_cpu_s'], 1)} "
                       f"({_n(r['mb_per_server_cpu_s_net_of_idle'], 1)}) | {lat} | {reqs} | {split} | "
                       f"{r['loadavg_before']} |")
            if len(r.get("runs", ())) > 1:
                figures = ", ".join(f"{_n(x['mb_per_server_cpu_s'], 1)} MB per CPU-s, p99 {x['p99_ms']} ms"
                                    + (f" (rtt {x['round_trip_p99_ms']})" if x.get("round_trip_p99_ms") else "")
                                    for x in r["runs"])
                spread.append(f"{parts} partition{'s' if parts != '1' else ''}, {label}: {figures}")
    if spread:
        out += ["", f"The phases the targets judge ran {d.get('target_runs', len(spread))} times each; the table "
                "shows the median run (by MB per server CPU-second at full rate, by p99 at half rate). All runs: "
                + "; ".join(spread) + "."]
    h = d["http"]
    out += ["", f"The HTTP API in the same run ({h['records_per_request']} records of {h['record_bytes']} B a request, "
            f"{h['produce']['clients']} clients, {h['partitions']} partitions):", "",
            "| request | MB/s | records/s | p50 / p99 ms | MB per server CPU-s |", "|---|---|---|---|---|"]
    for kind in ("produce", "read"):
        r = h[kind]
        out.append(f"| HTTP {kind} | {_n(r['mb_per_s'], 1)} | {_n(r['records_per_sec'])} | {r['p50_ms']} / "
                   f"{r['p99_ms']} | {_n(r['mb_per_server_cpu_s'], 1)} |")
    verdict = lambda k: "met" if met[k] else "not met"  # noqa: E731
    out += ["", f"Targets (the worse of 1 and 8 partitions): produce >= {_n(t['produce_mb_per_cpu_s'])} MB of "
            f"1 KiB records per server CPU-second: {_n(m['produce_mb_per_cpu_s'], 1)}, "
            f"{verdict('produce_mb_per_cpu_s')}; fetch from local segments >= {_n(t['fetch_local_mb_per_cpu_s'])} "
            f"MB per server CPU-second: {_n(m['fetch_local_mb_per_cpu_s'], 1)}, {verdict('fetch_local_mb_per_cpu_s')}; "
            f"p99 produce latency at half load <= {t['p99_produce_ms_at_half_load']} ms: "
            f"{m['p99_produce_ms_at_half_load']} ms, {verdict('p99_produce_ms_at_half_load')}."]
    floors = [(k.split("_")[0], r["produce_1kib_half_rate_acks0"]["p99_ms"]) for k, r in d["results"].items()
              if "produce_1kib_half_rate_acks0" in r]
    if floors:
        out[-1] += (" The same client at the same rate with acks=0, where no answer is awaited, measured a p99 of "
                    + " and ".join(f"{p99} ms at {parts} partition{'s' if parts != '1' else ''}" for parts, p99 in floors)
                    + ": the floor of linger.ms, lz4 and the client's delivery callbacks on this machine, which what "
                    "the server and its sync add comes on top of.")
    return out


def _coordinators() -> list[str]:
    out = []
    d = _load("txn")
    if d is None:
        out.append("**Transactions** (`bench txn`): _not measured yet_")
    else:
        out += [f"**Transactions** (`bench txn`){_scale(d)}: a confluent-kafka transactional producer against one "
                "`tiercompact serve`, each transaction its records then `commit_transaction()`.", "",
                "| partitions | transactions | records a transaction | transactions/s | records/s | commit p50 / p99 ms |",
                "|---|---|---|---|---|---|"]
        out += [f"| {r['partitions']} | {r['transactions']} | {r['records_per_txn']} | {r['txn_per_s']} | "
                f"{_n(r['records_per_s'])} | {r['commit_p50_ms']} / {r['commit_p99_ms']} |" for r in d["runs"]]
    d = _load("groups")
    if d is None:
        out += ["", "**Consumer groups** (`bench groups`): _not measured yet_"]
    else:
        out += ["", f"**Consumer groups** (`bench groups`){_scale(d)}: {d['members']} members on {d['partitions']} "
                f"partitions, {d['client']}; seconds until every member has its partitions again after a 9th member "
                "joins or one leaves (median and max of the rounds; the coordinator's own view beside it).", "",
                "| heartbeat.interval.ms | join: settle s (coordinator) | leave: settle s (coordinator) |",
                "|---|---|---|"]
        out += [f"| {r['heartbeat_interval_ms']} | {r['join_s_median']} / {r['join_s_max']} "
                f"({r['join_coordinator_s_median']}) | {r['leave_s_median']} / {r['leave_s_max']} "
                f"({r['leave_coordinator_s_median']}) |" for r in d["runs"]]
    return out


def report() -> str:
    parts = [_format(), _cleaner(), _fastpath(), _remote(), _tiered(), _spark(), _service(), _kafka(), _coordinators()]
    return "\n\n".join("\n".join(p) for p in parts) + "\n"


def summary() -> str:
    """The README's few headline figures, one row per benchmark, from the same result files."""
    rows = ["| what (`make bench ARGS=NAME`) | measured |", "|---|---|"]
    d = _load("fastpath")
    for r in (d or {}).get("results", []):
        if r["value_bytes"] == 100 and r["codec"] in ("none", "lz4"):
            c = r["compiled"]
            codec = "uncompressed" if r["codec"] == "none" else r["codec"]
            rows.append(f"| a local cleaning round, 100 B values, {codec} (`fastpath`) | "
                        f"{_n(c['mb_per_cpu_s'], 1)} MB and {_n(c['records_per_cpu_s'])} records per CPU-second, "
                        f"{r['compiled_vs_ceiling']} of the read + CRC + decompress + hash ceiling |")
    d = _load("tiered")
    r = (d or {}).get("results", {}).get("1000B_values_1000_dirty_keys")
    if d and r:
        k, b = r["key_index"], r.get("bloom_only")
        rows.append(f"| tiered round after 1,000 of {d['workload']['keys']:,} keys changed (`tiered`) | "
                    f"downloads {_mb(k['bytes_downloaded'])}, {k['downloaded_over_minimum']}x the least it could"
                    + (f" (bloom filters alone: {b['downloaded_over_minimum']}x)" if b else "") + " |")
    d = _load("service")
    t = (d or {}).get("throughput")
    if t:
        for kind in ("produce", "read"):
            r = t[kind]
            rows.append(f"| HTTP {kind}, {r['records_per_request']} records a request, {r['clients']} clients "
                        f"(`service`) | {_n(r['requests_per_sec'])} requests/s, p99 {r['p99_ms']} ms |")
    d = _load("kafka")
    if d:
        for key in ("1_partitions", "8_partitions"):
            res = d["results"].get(key)
            if res:
                p, f = res["produce_1kib"], res["fetch_local"]
                rows.append(f"| Kafka produce 1 KiB (lz4, acks=all) / consume, {key.split('_')[0]} partition(s), "
                            f"confluent-kafka (`kafka`) | {_n(p['mb_per_s'], 1)} / {_n(f['mb_per_s'], 1)} MB/s; "
                            f"{_n(p['mb_per_server_cpu_s'])} / {_n(f['mb_per_server_cpu_s'])} MB per server CPU-s; "
                            f"p99 {res['produce_1kib_half_rate']['p99_ms']} ms at half load |")
    d = _load("txn")
    r = next((r for r in (d or {}).get("runs", []) if r["partitions"] == 1), None)
    if r:
        rows.append(f"| Kafka transactions of {r['records_per_txn']} records, 1 partition (`txn`) | "
                    f"{r['txn_per_s']} transactions/s, commit p50 {r['commit_p50_ms']} ms, p99 {r['commit_p99_ms']} ms |")
    d = _load("groups")
    r = (d or {}).get("runs", [None])[0]
    if d and r:
        rows.append(f"| a consumer group of {d['members']} members settles after one joins (`groups`) | "
                    f"{r['join_s_median']} s median (heartbeat {r['heartbeat_interval_ms']} ms) |")
    d = _load("spark")
    if d:
        v = (d.get("variants") or {"disk": d})
        name, var = next(iter(v.items()))
        res = var["results"]
        rows.append(f"| Spark offload, {d['partitions']} partitions, {_mb(d['remote_bytes'])}, files in "
                    f"{name} (`spark`) | `local[2]` {res['spark_local_2']['wall_seconds']} s, in process "
                    f"{res['in_process']['wall_seconds']} s |")
    if len(rows) == 2:
        rows.append("| _not measured yet_ | |")
    return "\n".join(rows) + "\n"


def _replace(path: Path, marker: str, body: str) -> None:
    text = path.read_text()
    new, n = re.subn(rf"(<!-- {marker}:begin[^>]*-->\n).*?(<!-- {marker}:end -->)",
                     lambda m: m.group(1) + body + m.group(2), text, flags=re.S)
    if n != 1:
        raise SystemExit(f"{path.name} has no <!-- {marker}:begin --> ... <!-- {marker}:end --> section")
    path.write_text(new)


def write_docs() -> None:
    """Regenerate docs/benchmarks.md's full tables and the README's summary."""
    _replace(BENCHMARKS, "bench", report())
    _replace(README, "bench-summary", summary())


if __name__ == "__main__":
    if "--write" in sys.argv[1:]:
        write_docs()
    else:
        print(report(), end="")
