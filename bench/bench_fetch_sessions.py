"""Follower fetch bytes with and without fetch sessions (KIP-227), for 1000 partitions.

Run: ``.venv/bin/python bench/bench_fetch_sessions.py [--partitions N] [--active K]
[--rounds R]``.

One follower fetches ``--partitions`` partitions (spread over 10 topics) from one leader for
``--rounds`` rounds; before each round ``--active`` random partitions receive one 1 KiB batch
(the steady state of a cluster where few partitions are busy at a time). The same rounds run
twice through the real code: the follower's request from ``broker.fetcher.fetch_request`` with
its FetchSessionHandler, the leader's answer from ``broker.data_plane.fetch`` with its
FetchSessionCache (a stand-in ReplicaManager serves the reads), both encoded by the wire codec.
Once sessionless (every request and answer names every partition, as before sessions) and once
with sessions (after the first full fetch, only what changed). Prints the mean request and
response bytes per round of each and the ratios; the first (full) round is left out of the
session figures' mean but counted in the totals.
"""

from __future__ import annotations

import argparse
import asyncio
import random
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from broker import data_plane
from broker.fetch_session import FINAL_EPOCH, FetchSessionCache, PartitionRequest
from broker.fetch_session_handler import FetchRequestData, FetchSessionHandler
from broker.fetcher import FETCH_VERSION, FetcherConfig, fetch_request
from broker.replica_manager import ReadResult
from protocol import wire
from protocol.api_keys import ApiKey

BATCH_BYTES = 1024
TOPICS = 10
FOLLOWER_ID = 2


@dataclass
class Leader:
    """Just enough ReplicaManager for data_plane.fetch: per-partition batches, and a high
    watermark that follows the follower's fetch offset (a two-replica ISR)."""

    log_end: dict[tuple[str, int], int]
    high_watermark: dict[tuple[str, int], int] = field(default_factory=dict)

    def read_for_follower(
        self, replica_id: int, topic: str, index: int, offset: int, *_: Any, **__: Any
    ) -> ReadResult:
        key = (topic, index)
        self.high_watermark[key] = offset
        records = b"\0" * (BATCH_BYTES * (self.log_end[key] - offset))
        return ReadResult(ErrorCode.none, offset, 0, records)

    async def wait_for_changes(self, keys: object, timeout_s: float) -> list[object]:
        return []


def encoded_request(request: object, correlation_id: int) -> int:
    header = wire.RequestHeader(ApiKey.FETCH, FETCH_VERSION, correlation_id, "bench")
    return len(wire.encode_request(header, request))


def encoded_response(response: object, correlation_id: int) -> int:
    header = wire.RequestHeader(ApiKey.FETCH, FETCH_VERSION, correlation_id, "bench")
    return len(wire.encode_response(header, response))


async def run(partitions: int, active: int, rounds: int, sessions: bool) -> list[tuple[int, int]]:
    """(request bytes, response bytes) of each round."""
    keys = [(f"topic-{i % TOPICS}", i // TOPICS) for i in range(partitions)]
    leader = Leader({key: 0 for key in keys})
    follower = dict.fromkeys(keys, 0)  # fetch offsets
    cache = FetchSessionCache(1000, random.Random(1), asyncio.get_running_loop().time)
    handler = FetchSessionHandler()
    config = FetcherConfig()
    rng = random.Random(42)
    sizes = []
    for round_number in range(rounds):
        for key in rng.sample(keys, active):
            leader.log_end[key] += 1
        wanted = {
            key: PartitionRequest(offset, config.max_bytes, 0, 0, 0)
            for key, offset in follower.items()
        }
        # Sessionless: every partition in every request, epoch -1 (as before sessions).
        data = handler.build(wanted) if sessions else FetchRequestData(0, FINAL_EPOCH, wanted, ())
        request: Any = fetch_request(FOLLOWER_ID, config, data)
        response: Any = await data_plane.fetch(
            leader,  # type: ignore[arg-type]
            cache,
            lambda _id: None,
            request,
            FETCH_VERSION,
        )
        answered = [(t.topic, p.partition_index) for t in response.responses for p in t.partitions]
        if sessions:
            assert handler.handle_response(response.error_code, response.session_id, answered)
        for topic in response.responses:
            for answer in topic.partitions:
                follower[(topic.topic, answer.partition_index)] += (
                    len(answer.records) // BATCH_BYTES
                )
        sizes.append(
            (encoded_request(request, round_number), encoded_response(response, round_number))
        )
    assert follower == leader.log_end  # both ways, the follower copied every batch
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--active", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    full = asyncio.run(run(args.partitions, args.active, args.rounds, sessions=False))
    incremental = asyncio.run(run(args.partitions, args.active, args.rounds, sessions=True))
    steady = incremental[1:]

    def mean(values: list[int]) -> float:
        return sum(values) / len(values)

    print(
        f"{args.partitions} partitions, {args.active} with a new {BATCH_BYTES}-byte batch per "
        f"round, {args.rounds} rounds"
    )
    for what, i in (("request", 0), ("response", 1)):
        without = mean([s[i] for s in full])
        with_ = mean([s[i] for s in steady])
        print(
            f"{what:8} bytes/round: without sessions {without:10.0f}   with sessions "
            f"{with_:10.0f} (first, full: {incremental[0][i]})   ratio {without / with_:6.1f}x"
        )
    total_without = sum(a + b for a, b in full)
    total_with = sum(a + b for a, b in incremental)
    print(
        f"total bytes both ways: without {total_without}   with {total_with}   "
        f"ratio {total_without / total_with:.1f}x"
    )


if __name__ == "__main__":
    main()
