"""The seed at which a 30 s run first catches each planted bug: the sweep tests replay them,
and the analysis tests check that kraft-analyze flags the same runs from their traces."""

# Each raft planted bug, with the first seed a 30 s run catches it at (sweeps in docs/raft.md
# and docs/simulation.md), the observer count varying with the seed as in every default run
# (0, 1, 2 for seed mod 3) and the voter count too (1 for seeds divisible by 7, else 3).
RAFT_BUG_SEEDS = {
    "state-not-fsynced": 1,
    "no-truncate-on-divergence": 1,
    "hw-from-previous-epoch": 1,
    "no-check-quorum": 2,
    "ack-before-fsync": 1,
    "vote-without-log-check": 6,
    # Issue 17, classes 1-4 (docs/simulation.md, "Raft: the bugs Kafka had").
    "truncate-to-high-watermark": 1,
    "leader-counts-unflushed": 1,
    "fetch-before-flush": 1,
    "check-quorum-needs-fetch": 7,
    "snapshot-hw-not-adopted": 1,
    "snapshot-keeps-log-start": 1,
}


# Each membership planted bug (raft/core.py MEMBER_BUGS), with the first seed a 20 s raft run
# with the opt-in membership fault catches it at (RAFT_MEMBER_ARGS; docs/raft.md).
RAFT_MEMBER_BUG_SEEDS = {
    "voter-set-applied-at-commit": 8,
    "removed-voter-keeps-leading": 4,
}
RAFT_MEMBER_ARGS = ("--faults", "all,membership", "--duration", "20")


# Each controller planted bug, with the first seed a 30 s run catches it at.
METADATA_BUG_SEEDS = {
    "answer-before-commit": 2,
    "config-answer-before-commit": 2,
    "unfence-before-caught-up": 1,
    "leader-outside-isr": 1,
    # Caught by controlled-shutdown (liveness) only: nothing but a graceful shutdown asks.
    "shutdown-keeps-leaders": 1,
}


# Raft planted bugs with a check of their own in the metadata scenario: (seed, the check).
METADATA_RAFT_BUG_SEEDS = {
    "hw-from-previous-epoch": (1, "commit-own-epoch"),
    "no-check-quorum": (3, "check-quorum"),
    # An observer bug (raft/core.py OBSERVER_BUGS), planted in the metadata scenario only.
    "observer-stops-on-fetch-error": (1, "stale-metadata"),
}


# Each kafka-scenario planted bug (broker/bugs.py, plus the controller's leader-outside-isr,
# the unclean election), with the first seed a 20 s run catches it at, and any flags it needs.
KAFKA_BUG_SEEDS = {
    "ack-before-fetch": 5,
    "hw-before-isr": 5,
    "truncate-to-hw": 5,
    # 23 since the round-3 merges moved the schedule (38 before; 7 before KIP-966's strict
    # min ISR and fetch sessions, under which a leader whose local ISR fell below
    # min.insync.replicas no longer advances its high watermark over it).
    "isr-shrink-local": 23,
    "no-epoch-bump": 36,
    "leader-outside-isr": 3,
    "skip-sequence-check": 10,
    # 7 since the round-3 merges (15 before).
    "coordinator-hw-over-truncated": 7,
    # The transactional bugs, with the transactional lanes (sim/scenarios/kafka_txn.py).
    "txn-lso-ignores-open": 1,
    "txn-no-aborted-list": 1,
    # Jepsen's Bufstream anomaly, with the delay-txn fault: 23 since lane 0 and the worker
    # speak TV2 (lost-committed-write: a late marker of the same epoch ended a TV1 lane's
    # next transaction; the TV2 lanes' bumped epochs make partitions refuse late markers, so
    # only lane 1 is exposed); 2 with every lane on TV1, 12 before the worker lane.
    "txn-complete-before-markers": 23,
    # The worker's offsets of an aborted transaction applied: it restarts past input whose
    # output was aborted (ctp-offsets). 2 since the TV2 lanes (1 before).
    "txn-offsets-kept-on-abort": 2,
    # A transaction left open by a lane stopped inside it at the end of the run is never
    # aborted: the final reads find its partition's LSO stuck (hanging-transaction). 6 since
    # the marker-retry fix (2 before, where that bug helped).
    "txn-timeout-never-aborts": 6,
}
KAFKA_BUG_ARGS: dict[str, tuple[str, ...]] = {
    "skip-sequence-check": ("--idempotent",),
    "txn-lso-ignores-open": ("--transactions",),
    "txn-no-aborted-list": ("--transactions",),
    "txn-complete-before-markers": ("--transactions", "--faults", "all,delay-txn"),
    "txn-offsets-kept-on-abort": ("--transactions",),
    "txn-timeout-never-aborts": ("--transactions",),
}

# Issue 28's data-plane classes: each planted bug, the first seed (20 s runs) at which the
# opt-in faults aimed at its window catch it, those faults and flags, and the check that
# names it (docs/simulation.md, "The data plane's narrow windows").
DATA_PLANE_BUG_CHECKS = {
    "hw-before-divergence-check": "committed-on-isr",
    "follower-truncate-to-leader-end": "replica-catch-up",
}
KAFKA_BUG_SEEDS["hw-before-divergence-check"] = 4  # 2 before the round-3 merges moved the schedule
KAFKA_BUG_ARGS["hw-before-divergence-check"] = (
    "--acks",
    "1",
    "--faults",
    "leader-change-during-catch-up",
)
KAFKA_BUG_SEEDS["follower-truncate-to-leader-end"] = 2
KAFKA_BUG_ARGS["follower-truncate-to-leader-end"] = (
    "--acks",
    "1",
    "--faults",
    "successive-minority-leaders",
)
# Issue 28 item 3: a producer state a truncation left stale names, for a producer's
# resend, the offset its batch had before the cut (duplicate-offset, in the resends after
# the heal; seeds 1-6 clean).
DATA_PLANE_BUG_CHECKS["idempotent-stale-duplicate"] = "duplicate-offset"
KAFKA_BUG_SEEDS["idempotent-stale-duplicate"] = 7
KAFKA_BUG_ARGS["idempotent-stale-duplicate"] = ("--idempotent",)
# KIP-848: a coordinator that does not count partitions being revoked as held gives them to
# their next owner while the previous one still consumes them (exclusive-assignment, from the
# --consumer-protocol lanes' member-assignment events).
KAFKA_BUG_SEEDS["assign-before-revoke"] = 1
KAFKA_BUG_ARGS["assign-before-revoke"] = ("--consumer-protocol",)
# ACLs: an authorizer that lets the first matching ALLOW decide answers the --acls lane's
# denied requests (acl-bypassed, from its acl-answer events).
KAFKA_BUG_SEEDS["allow-before-deny"] = 1
KAFKA_BUG_ARGS["allow-before-deny"] = ("--authorizer", "--acls")
# Client quotas: a broker that answers a throttle time without muting the connection lets
# the --quotas lane, which ignores throttle times, run past its quota (quota-exceeded).
KAFKA_BUG_SEEDS["throttle-without-mute"] = 1
KAFKA_BUG_ARGS["throttle-without-mute"] = ("--quotas",)
