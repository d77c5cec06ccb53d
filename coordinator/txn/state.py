"""Kafka's transaction states, the transitions ``TransactionMetadata`` allows between them, and the error codes the coordinator answers."""

from __future__ import annotations

import enum

# the numbers of org.apache.kafka.common.protocol.Errors
NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
INVALID_REQUEST = 42
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
INVALID_TRANSACTION_TIMEOUT = 50
CONCURRENT_TRANSACTIONS = 51
TRANSACTION_COORDINATOR_FENCED = 52
OPERATION_NOT_ATTEMPTED = 55
PRODUCER_FENCED = 90
TRANSACTIONAL_ID_NOT_FOUND = 105

#: an epoch this high makes the next bump take a new producer id (Kafka's Short.MaxValue - 1 rule)
MAX_EPOCH = 32766


class TxnState(enum.Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"

    @property
    def preparing(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @property
    def complete(self) -> bool:
        return self in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


_S = TxnState
#: state -> the states it may be entered from (Kafka's TransactionState.validPreviousStates)
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    _S.EMPTY: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.ONGOING: frozenset({_S.ONGOING, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
    _S.PREPARE_ABORT: frozenset({_S.ONGOING}),
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
    _S.DEAD: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
}


class IllegalTransition(Exception):
    """A transition Kafka's TransactionMetadata refuses (a coordinator bug, never a client's doing)."""


def check_transition(old: TxnState, new: TxnState) -> None:
    if old not in VALID_PREVIOUS[new]:
        raise IllegalTransition(f"transaction state {old.value} -> {new.value} is not allowed")


def fenced_code(api: str, version: int) -> int:
    """PRODUCER_FENCED (KIP-588) for the versions that know it, INVALID_PRODUCER_EPOCH before."""
    first = {"InitProducerId": 4, "AddPartitionsToTxn": 2, "AddOffsetsToTxn": 2, "EndTxn": 2,
             "TxnOffsetCommit": 3}.get(api, 99)
    return PRODUCER_FENCED if version >= first else INVALID_PRODUCER_EPOCH
