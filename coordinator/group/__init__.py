"""Kafka's classic group coordinator (JoinGroup/SyncGroup/Heartbeat/LeaveGroup and group offsets) over the metadata store."""
