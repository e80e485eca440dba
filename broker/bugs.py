"""Planted bugs of the broker (replication, the group and transaction coordinators, the
authorizer, client quotas), each a protocol change drawn from Kafka's history or a mistake an
implementation easily makes, for the simulator's kafka scenario to catch (``kraft-sim run
--bug NAME``; never set outside a simulation). tests/planted.py pins the first seed that
catches each."""

from __future__ import annotations

from metadata.authorizer import ALLOW_BEFORE_DENY

TRUNCATE_TO_HW = "truncate-to-hw"
HW_BEFORE_ISR = "hw-before-isr"
ISR_SHRINK_LOCAL = "isr-shrink-local"
NO_EPOCH_BUMP = "no-epoch-bump"
ACK_BEFORE_FETCH = "ack-before-fetch"
SKIP_SEQUENCE_CHECK = "skip-sequence-check"
COORDINATOR_HW_OVER_TRUNCATED = "coordinator-hw-over-truncated"
HW_BEFORE_DIVERGENCE_CHECK = "hw-before-divergence-check"
FOLLOWER_TRUNCATE_TO_LEADER_END = "follower-truncate-to-leader-end"
IDEMPOTENT_STALE_DUPLICATE = "idempotent-stale-duplicate"
# Transactions (the kafka scenario's --transactions lanes catch them; docs/transactions.md).
TXN_LSO_IGNORES_OPEN = "txn-lso-ignores-open"
TXN_NO_ABORTED_LIST = "txn-no-aborted-list"
TXN_COMPLETE_BEFORE_MARKERS = "txn-complete-before-markers"
TXN_OFFSETS_KEPT_ON_ABORT = "txn-offsets-kept-on-abort"
TXN_TIMEOUT_NEVER_ABORTS = "txn-timeout-never-aborts"
# KIP-848 consumer groups (the kafka scenario's --consumer-protocol lanes catch it).
ASSIGN_BEFORE_REVOKE = "assign-before-revoke"
# Client quotas (the kafka scenario's --quotas lane catches it).
THROTTLE_WITHOUT_MUTE = "throttle-without-mute"

BROKER_BUGS = {
    TRUNCATE_TO_HW: "a new follower truncates its log to its high watermark (before KIP-101)",
    HW_BEFORE_ISR: "a leader moves its high watermark to its log end before the ISR has it",
    ISR_SHRINK_LOCAL: "a leader shrinks its ISR locally without the controller's commit",
    NO_EPOCH_BUMP: "a new leader neither records its epoch nor stamps its batches with it",
    ACK_BEFORE_FETCH: "acks=all is answered once the leader appended, before any follower",
    SKIP_SEQUENCE_CHECK: "a producer's retried batch is appended again (no duplicate check)",
    COORDINATOR_HW_OVER_TRUNCATED: "a group coordinator acknowledges a commit once the high "
    "watermark passes its offset, though leadership moved and the record was truncated "
    "(KAFKA-20634)",
    HW_BEFORE_DIVERGENCE_CHECK: "a leader counts a follower's fetch offset towards its high "
    "watermark before checking that follower's log against its own",
    FOLLOWER_TRUNCATE_TO_LEADER_END: "a follower told its log diverges at an epoch it does not "
    "have truncates to the leader's end of that epoch, not its own end of its older epoch "
    "(KAFKA-6361, fixed by KIP-279)",
    IDEMPOTENT_STALE_DUPLICATE: "a replica's idempotent-producer state is built when it opens "
    "the partition and never rebuilt when its log is truncated, so a leader may answer a "
    "producer's retry as a duplicate of an offset that no longer holds the batch (issue 28)",
    TXN_LSO_IGNORES_OPEN: "the last stable offset is the high watermark: open transactions "
    "do not hold read_committed consumers back",
    TXN_NO_ABORTED_LIST: "a read_committed Fetch lists no aborted transactions, so consumers "
    "keep aborted records",
    TXN_COMPLETE_BEFORE_MARKERS: "the transaction coordinator answers EndTxn once prepared, "
    "writes CompleteCommit/CompleteAbort and takes the next transaction before the markers "
    "are written, so a late marker of the same epoch (TV1) ends the next transaction",
    TXN_OFFSETS_KEPT_ON_ABORT: "the group coordinator applies a transaction's pending "
    "TxnOffsetCommit offsets at its abort marker as at a commit marker, so a consume-"
    "transform-produce job restarts past input whose output was aborted",
    TXN_TIMEOUT_NEVER_ABORTS: "the transaction coordinator never aborts a transaction open "
    "past its transaction.timeout.ms, so one whose producer stopped inside it (and never "
    "came back to fence it) stays open: its partitions' last stable offsets hang there",
    ASSIGN_BEFORE_REVOKE: "a consumer-group coordinator (KIP-848) does not count the "
    "partitions a member is still revoking as held, so it gives them to their next owner "
    "before the previous one has given them up: two members consume one partition",
    # ACLs (metadata/authorizer.py; the kafka scenario's --acls lane catches it).
    ALLOW_BEFORE_DENY: "the authorizer lets the first matching ALLOW decide, so a DENY "
    "listed after it is never consulted (Kafka: a matching DENY always wins)",
    THROTTLE_WITHOUT_MUTE: "a broker over a client's byte-rate quota answers with a throttle "
    "time but does not mute the connection (before KIP-219 Kafka delayed the response "
    "instead), so a client that ignores the throttle time is never held back",
}
