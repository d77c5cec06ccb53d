"""Kafka's coordinators over the metadata store: slot ownership (coordinator epochs), the group coordinator, the transaction coordinator.

Layout (a layer between service and cleaner; only service imports it):

- ``coordinator.ownership``: keys -> Kafka's slots (abs(hashCode) % N); one live owner per slot,
  claimed with an epoch by compare-and-swap (``metadata.coordinators``). A coordinator registers
  ``on_load(slot, epoch)`` / ``on_unload(slot)`` with :meth:`CoordinatorOwnership.add_listener`,
  answers NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS from :meth:`CoordinatorOwnership.lookup`,
  and fences each store write with ``metadata.sql_coordinators.fence(conn, kind, slot, broker, epoch)``
  inside the write's own transaction.
- ``coordinator.group``: the classic group coordinator. Its port for the transaction coordinator:
  ``await gc.call(gc.txn_offset_commit(group_id, producer_id, producer_epoch, {tp: CommittedOffset},
  generation, member_id, instance_id))`` (TxnOffsetCommit: per-partition error codes; the offsets stay
  pending) and ``gc.complete_txn(producer_id, commit, group_ids)`` (blocking, any thread, idempotent:
  the marker makes them committed or drops them).

``service.kafka.coordinators.Coordinators`` wires both kinds of ownership and the coordinators to a node.
"""
