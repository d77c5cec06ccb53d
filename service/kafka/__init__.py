"""The Kafka wire protocol front door: importing this package registers every API handler module."""

from service.kafka import (
    acls,  # noqa: F401
    admin,  # noqa: F401
    admin_configs,  # noqa: F401
    api_versions,  # noqa: F401
    config_resources,  # noqa: F401
    delete_records,  # noqa: F401
    elections,  # noqa: F401
    fetch,  # noqa: F401
    find_coordinator,  # noqa: F401
    group_admin,  # noqa: F401
    group_offsets,  # noqa: F401
    groups,  # noqa: F401
    init_producer_id,  # noqa: F401
    log_dirs,  # noqa: F401
    metadata_api,  # noqa: F401
    offsets,  # noqa: F401
    produce,  # noqa: F401
    producers,  # noqa: F401
    reassignments,  # noqa: F401
    sasl_api,  # noqa: F401
    scram_admin,  # noqa: F401
    topic_partitions,  # noqa: F401
    transactions,  # noqa: F401
    txn_admin,  # noqa: F401
    txn_markers,  # noqa: F401
)
