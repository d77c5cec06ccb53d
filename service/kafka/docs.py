"""The protocol tables, generated from the handler registry: docs/kafka.md's (every API, its versions and what
differs from Kafka) and the README's summary (APIs by area). Run ``python -m service.kafka.docs [--readme]``."""

from __future__ import annotations

import service.kafka  # noqa: F401  (registers every handler)
from service.kafka.registry import registered

#: per API, what differs from Apache Kafka's broker (empty: nothing known)
DIFFERENCES: dict[str, str] = {
    "Produce": "acks 0/1/-1; acks=-1 answers once the batch is on disk (one copy, no replicas): one sync per "
               "connection's batch of queued requests, a syncfs for several partitions, else an fsync; idempotent producers as Kafka; transactional batches need no AddPartitionsToTxn check "
               "(no KIP-890 verification)",
    "Fetch": "sessionless answers (session id 0); stored bytes from local or remote segments; no follower fetching",
    "ListOffsets": "earliest, latest, max timestamp and by timestamp over both tiers; read_committed gives the LSO",
    "Metadata": "every topic of the shared metadata store; replicas = ISR = the leader; an unknown topic is "
                "auto-created as Kafka's broker does (auto_create_topics_enable, num_partitions), and answered "
                "with its partitions at once (Kafka's controller answers LEADER_NOT_AVAILABLE first); a dead "
                "leader shows LEADER_NOT_AVAILABLE (no election); every topic and cluster operation authorized "
                "when asked (no authorizer)",
    "SaslHandshake": "SCRAM-SHA-256, SCRAM-SHA-512; PLAIN only over TLS",
    "ApiVersions": "lists exactly the APIs of this table; an unknown version gets KIP-511's v0 answer",
    "CreateTopics": "replication factor 1 (or -1); replica assignments refused; a topic created without "
                    "cleanup.policy is compacted (Kafka's default is delete: tiercompact is for compacted topics), "
                    "so keyless records need cleanup.policy=delete; v0-v1 through kio",
    "DeleteRecords": "one copy: answered once the new log start offset is on disk (and, tiered, in the metadata "
                     "store); segments below it go with the next retention pass, remote ones too",
    "ListConfigResources": "topics and brokers (by id) of the cluster; no group and no client-metrics resources "
                           "exist (no group configs, no KIP-714 subscriptions); BROKER_LOGGER unsupported "
                           "(UNSUPPORTED_VERSION, as Kafka for a type it does not list)",
    "DeleteTopics": "fenced like DELETE /v1/topics (the node must lead every tiered partition); v0 through kio",
    "InitProducerId": "ids unique across the nodes of a metadata store; with a transactional.id the epoch is "
                      "bumped and the old epoch's open transaction aborted (KIP-360 retries); no 2PC (v5+)",
    "AddPartitionsToTxn": "v0-v3 (no broker-side verification batches of v4+)",
    "AddOffsetsToTxn": "the group is recorded in the transaction; its offsets wait in the group store",
    "EndTxn": "answers once PrepareCommit/PrepareAbort is stored; markers follow, retried until written; no "
              "KIP-890 epoch bump per transaction (v5+)",
    "WriteTxnMarkers": "node to node (SCRAM when the node has credentials); any authenticated principal may call it "
                       "(no CLUSTER_ACTION ACL); a marker from an older coordinator epoch is refused",
    "TxnOffsetCommit": "pending in the metadata store until the transaction's marker; KIP-447 generation check",
    "DescribeProducers": "the producer state of the partitions this node leads",
    "DescribeAcls": "SECURITY_DISABLED, as a Kafka broker with no authorizer: authenticated principals may call "
                    "every API",
    "CreateAcls": "SECURITY_DISABLED (no authorizer)",
    "DeleteAcls": "SECURITY_DISABLED (no authorizer)",
    "DescribeTransactions": "the transactional ids of the slots this node holds",
    "ListTransactions": "the transactional ids of the slots this node holds (clients ask every broker); state, "
                        "producer id and duration filters",
    "OffsetForLeaderEpoch": "from the leader-epoch cache, cut at the log start as DeleteRecords and retention (local, or remote for a tiered partition) move it; v0-v1 through kio",
    "DescribeConfigs": "the topic configs of the HTTP API; a broker lists its settings and topic defaults under Kafka's broker names, read-only (they are `tiercompact serve` options); v0 through kio",
    "AlterConfigs": "topic configs, validated as PATCH .../config",
    "SaslAuthenticate": "no re-authentication (session lifetime 0)",
    "CreatePartitions": "replica assignments refused",
    "IncrementalAlterConfigs": "SET and DELETE on topic configs",
    "ElectLeaders": "each partition's only replica is its leader: ELECTION_NOT_NEEDED while it is alive, else "
                    "PREFERRED_LEADER_NOT_AVAILABLE / ELIGIBLE_LEADERS_NOT_AVAILABLE (leadership moves with POST "
                    ".../leadership)",
    "ListPartitionReassignments": "none is ever in progress: a partition's one replica is its leader",
    "AlterPartitionReassignments": "one replica per partition: its current one is done at once, a cancel is "
                                   "NO_REASSIGNMENT_IN_PROGRESS, any other INVALID_REPLICA_ASSIGNMENT (a partition "
                                   "moves with POST .../leadership)",
    "DescribeLogDirs": "one log dir per node (its data dir); the partitions it leads, with their local bytes "
                       "(remote segments not counted, as Kafka); offset lag 0 (one copy)",
    "DescribeCluster": "brokers of the cluster registry; no controllers endpoint; every cluster operation "
                       "authorized when asked (no authorizer)",
    "DescribeTopicPartitions": "Metadata's partitions, paged by cursor (at most 2000 an answer); no eligible leader "
                               "replicas (one copy); every topic operation authorized (no authorizer)",
    "FindCoordinator": "GROUP and TRANSACTION keys; a key's coordinator is the live node holding its slot "
                       "(abs(hashCode) % 50, as Kafka's __consumer_offsets partitions) in the metadata store, "
                       "claimed with an epoch; there is no internal topic",
    "JoinGroup": "the classic protocol (no KIP-848); KIP-394 member ids, KIP-345 static members",
    "LeaveGroup": "batched members from v3",
    "OffsetCommit": "offsets live in the metadata store, written under the coordinator epoch; expired per "
                    "offsets.retention.minutes once the group is empty (KIP-211); v0-v1 through kio: v0 offsets "
                    "share the group's store (no ZooKeeper), v1's commit_timestamp is not used",
    "OffsetFetch": "require_stable answers UNSTABLE_OFFSET_COMMIT while a transaction holds offsets; v0 through kio",
    "ListGroups": "the groups of the coordinator slots this node holds (clients ask every broker)",
    "DescribeGroups": "every group operation authorized when asked (no authorizer)",
    "DescribeUserScramCredentials": "the metadata store's users, and this node's users-file users (both "
                                    "mechanisms, 4096 iterations)",
    "AlterUserScramCredentials": "stored in the metadata store (every node accepts them); users of the node's "
                                 "users file refused (edit the file); any authenticated principal may call it "
                                 "(no authorizer)",
}


#: per area of the README's summary, what differs from Apache Kafka there, in short (docs/kafka.md has each API's)
AREAS: dict[str, str] = {
    "produce and read": "one copy of the data: acks=-1 answers once on disk; sessionless fetch; no follower fetching",
    "topics and cluster": "replication factor 1; a dead leader shows LEADER_NOT_AVAILABLE (no election); no "
                          "replica reassignment (a partition moves with POST .../leadership)",
    "consumer groups": "the classic protocol (no KIP-848); offsets live in the metadata store (no internal topic)",
    "transactions": "no KIP-890 verification or per-transaction epoch bump",
    "connections": "SCRAM-SHA-256/512, PLAIN only over TLS; SCRAM users in the metadata store; no "
                   "re-authentication; no authorizer (ACL APIs answer SECURITY_DISABLED)",
}

#: the area of each API in the README's summary
AREA_OF: dict[str, str] = {
    **dict.fromkeys(("Produce", "Fetch", "ListOffsets", "OffsetForLeaderEpoch", "InitProducerId", "DeleteRecords"),
                    "produce and read"),
    **dict.fromkeys(("Metadata", "CreateTopics", "DeleteTopics", "CreatePartitions", "DescribeConfigs", "AlterConfigs",
                     "IncrementalAlterConfigs", "ListConfigResources", "DescribeCluster", "DescribeLogDirs", "ElectLeaders",
                     "DescribeTopicPartitions", "ListPartitionReassignments", "AlterPartitionReassignments"),
                    "topics and cluster"),
    **dict.fromkeys(("FindCoordinator", "JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup", "OffsetCommit",
                     "OffsetFetch", "OffsetDelete", "DescribeGroups", "ListGroups", "DeleteGroups"), "consumer groups"),
    **dict.fromkeys(("AddPartitionsToTxn", "AddOffsetsToTxn", "EndTxn", "WriteTxnMarkers", "TxnOffsetCommit",
                     "DescribeTransactions", "ListTransactions", "DescribeProducers"), "transactions"),
    **dict.fromkeys(("ApiVersions", "SaslHandshake", "SaslAuthenticate", "DescribeAcls", "CreateAcls", "DeleteAcls",
                     "DescribeUserScramCredentials", "AlterUserScramCredentials"), "connections"),
}


def readme_api_summary_markdown() -> str:
    """The README's table: per area, its APIs with their versions and what differs from Kafka in short."""
    by_area: dict[str, list[str]] = {area: [] for area in AREAS}
    for spec in registered():
        area = AREA_OF.get(spec.name)
        if area is None:
            raise KeyError(f"{spec.name} has no area in service/kafka/docs.py's AREA_OF")
        by_area[area].append(f"{spec.name} {spec.min_version}-{spec.max_version}")
    lines = ["| area | APIs (versions) | differs from Kafka |", "|---|---|---|"]
    lines += [f"| {area} | {', '.join(apis)} | {AREAS[area]} |" for area, apis in by_area.items()]
    return "\n".join(lines) + "\n"


def kafka_api_table_markdown() -> str:
    lines = ["| API (key) | versions | what differs from Kafka |", "|---|---|---|"]
    for spec in registered():
        lines.append(f"| {spec.name} ({spec.api_key}) | {spec.min_version}-{spec.max_version} | "
                     f"{DIFFERENCES.get(spec.name, '')} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    import sys

    print(readme_api_summary_markdown() if "--readme" in sys.argv[1:] else kafka_api_table_markdown(), end="")
