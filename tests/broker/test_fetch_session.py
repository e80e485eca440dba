"""Fetch sessions (KIP-227) without I/O: the broker's FetchSessionCache and the fetcher's
FetchSessionHandler, driven by hand and, in the model test, by hypothesis against a full
fetch of the same state."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from pytest import MonkeyPatch

from broker import data_plane, fetch_session
from broker.fetch_session import (
    EVICTION_MS,
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    MAX_SESSION_ID,
    FetchSessionCache,
    PartitionAnswer,
    PartitionKey,
    PartitionRequest,
    next_epoch,
)
from broker.fetch_session_handler import FetchSessionHandler
from broker.replica_manager import ReadResult
from protocol import wire
from protocol.entities import make, request_module


@dataclass
class FakeClock:
    now_s: float = 1000.0

    def __call__(self) -> float:
        return self.now_s


def cache(slots: int = 10, clock: FakeClock | None = None) -> FetchSessionCache:
    return FetchSessionCache(slots, random.Random(7), clock or FakeClock())


def ask(offset: int = 0) -> PartitionRequest:
    return PartitionRequest(fetch_offset=offset, partition_max_bytes=1 << 20)


def seen(hw: int = 0, records: int = 0, error: int = ErrorCode.none) -> PartitionAnswer:
    return PartitionAnswer(records, hw, hw, 0, error)


A, B, C = ("t", 0), ("t", 1), ("u", 0)


def open_session(
    sessions: FetchSessionCache,
    keys: list[PartitionKey],
    *,
    privileged: bool = False,
    uses_topic_ids: bool = False,
) -> int:
    context = sessions.new_context(
        INVALID_SESSION_ID,
        INITIAL_EPOCH,
        privileged,
        uses_topic_ids,
        [(key, ask()) for key in keys],
        [],
    )
    return context.respond([seen() for _ in keys]).session_id


def test_a_full_fetch_opens_a_session_that_answers_only_what_changed() -> None:
    sessions = cache()
    session_id = open_session(sessions, [A, B, C])
    assert session_id != INVALID_SESSION_ID and sessions.get(session_id).epoch == 1  # type: ignore[union-attr]
    context = sessions.new_context(session_id, 1, False, False, [], [])
    # Incremental: every session partition is read, at the offsets the session remembers.
    assert [key for key, _ in context.partitions] == [A, B, C]
    result = context.respond([seen(), seen(hw=5), seen(records=10)])
    assert result.error == ErrorCode.none and result.session_id == session_id
    assert [context.partitions[i][0] for i in result.selected] == [B, C]
    # C got data: it moves to the back so the byte budget rotates; nothing changed since.
    context = sessions.new_context(session_id, 2, False, False, [], [])
    assert [key for key, _ in context.partitions] == [A, B, C]
    assert context.respond([seen(), seen(hw=5), seen()]).selected == ()


def test_a_moved_last_stable_offset_alone_is_answered() -> None:
    """read_committed (transactions): the LSO can move while the high watermark stands
    still (an open transaction's marker is written and replicated); an incremental fetch
    must answer the partition, or a read_committed consumer waits at the old LSO."""
    sessions = cache()
    session_id = open_session(sessions, [A])
    context = sessions.new_context(session_id, 1, False, False, [], [])
    assert context.respond([PartitionAnswer(0, 9, 4, 0)]).selected == (0,)  # LSO 0 -> 4
    context = sessions.new_context(session_id, 2, False, False, [], [])
    assert context.respond([PartitionAnswer(0, 9, 4, 0)]).selected == ()
    context = sessions.new_context(session_id, 3, False, False, [], [])
    assert context.respond([PartitionAnswer(0, 9, 9, 0)]).selected == (0,)  # LSO 4 -> 9


def test_records_move_a_partition_to_the_back_of_the_session() -> None:
    sessions = cache()
    session_id = open_session(sessions, [A, B, C])
    context = sessions.new_context(session_id, 1, False, False, [], [])
    context.respond([seen(records=3), seen(), seen()])
    context = sessions.new_context(session_id, 2, False, False, [], [])
    assert [key for key, _ in context.partitions] == [B, C, A]


def test_an_error_is_answered_every_time_and_the_partition_again_once_it_clears() -> None:
    sessions = cache()
    session_id = open_session(sessions, [A, B])
    failing = seen(hw=-1, error=ErrorCode.not_leader_or_follower)
    for epoch in (1, 2):
        context = sessions.new_context(session_id, epoch, False, False, [], [])
        assert context.respond([failing, seen()]).selected == (0,)
    context = sessions.new_context(session_id, 3, False, False, [], [])
    # The high watermark is where it was before the error, yet the client must hear it.
    assert context.respond([seen(), seen()]).selected == (0,)


def test_changed_fetch_parameters_replace_the_remembered_ones_and_forgotten_leave() -> None:
    sessions = cache()
    session_id = open_session(sessions, [A, B])
    context = sessions.new_context(session_id, 1, False, False, [(B, ask(7)), (C, ask(3))], [A])
    assert context.partitions == [(B, ask(7)), (C, ask(3))]


def test_forgetting_every_partition_closes_the_session_with_a_sessionless_answer() -> None:
    sessions = cache()
    session_id = open_session(sessions, [A])
    context = sessions.new_context(session_id, 1, False, False, [], [A])
    assert context.respond([]).session_id == INVALID_SESSION_ID
    assert sessions.get(session_id) is None


def test_session_errors_unknown_id_wrong_epoch_and_topic_id_mismatch() -> None:
    sessions = cache()
    session_id = open_session(sessions, [A])
    unknown = sessions.new_context(session_id + 1, 1, False, False, [], [])
    assert unknown.partitions == []
    assert unknown.respond([]).error == ErrorCode.fetch_session_id_not_found
    stale = sessions.new_context(session_id, 5, False, False, [], [])
    assert stale.respond([]).error == ErrorCode.invalid_fetch_session_epoch
    by_id = sessions.new_context(session_id, 1, False, True, [], [])
    assert by_id.respond([]).error == ErrorCode.fetch_session_topic_id_error
    # None of these moved the session on: the right request still works.
    assert sessions.new_context(session_id, 1, False, False, [], []).respond([seen()]).error == 0


def test_a_request_overtaken_on_its_session_gets_an_epoch_error() -> None:
    sessions = cache()
    session_id = open_session(sessions, [A])
    first = sessions.new_context(session_id, 1, False, False, [], [])
    second = sessions.new_context(session_id, 2, False, False, [], [])
    answer = first.respond([seen()])
    assert (answer.error, answer.session_id) == (ErrorCode.invalid_fetch_session_epoch, session_id)
    assert second.respond([seen()]).error == ErrorCode.none


def test_sessionless_fetches_and_full_fetches_that_close_a_session() -> None:
    sessions = cache()
    context = sessions.new_context(INVALID_SESSION_ID, FINAL_EPOCH, False, False, [(A, ask())], [])
    assert context.respond([seen()]).session_id == INVALID_SESSION_ID and len(sessions) == 0
    session_id = open_session(sessions, [A])
    # A full fetch naming its old session closes it and opens a new one.
    context = sessions.new_context(session_id, INITIAL_EPOCH, False, False, [(A, ask())], [])
    new_id = context.respond([seen()]).session_id
    assert new_id not in (INVALID_SESSION_ID, session_id)
    assert sessions.get(session_id) is None and len(sessions) == 1
    # Epoch -1 with a session id closes it and answers without one.
    context = sessions.new_context(new_id, FINAL_EPOCH, False, False, [(A, ask())], [])
    assert context.respond([seen()]).session_id == INVALID_SESSION_ID and len(sessions) == 0


def test_the_session_epoch_wraps_to_one() -> None:
    assert next_epoch(MAX_SESSION_ID) == 1
    assert next_epoch(INITIAL_EPOCH) == 1 and next_epoch(FINAL_EPOCH) == FINAL_EPOCH
    sessions = cache()
    session_id = open_session(sessions, [A])
    session = sessions.get(session_id)
    assert session is not None
    session.epoch = MAX_SESSION_ID
    sessions.new_context(session_id, MAX_SESSION_ID, False, False, [], [])
    assert session.epoch == 1
    assert sessions.new_context(session_id, 1, False, False, [], []).respond([seen()]).error == 0


def test_a_full_cache_answers_without_a_session_until_something_may_be_evicted() -> None:
    clock = FakeClock()
    sessions = cache(slots=2, clock=clock)
    small = open_session(sessions, [A])
    large = open_session(sessions, [A, B, C])
    # Young consumer sessions are safe from consumers: no session, a sessionless answer.
    assert open_session(sessions, [A, B, C]) == INVALID_SESSION_ID
    # A follower evicts the smallest consumer session, young or not.
    first = open_session(sessions, [A], privileged=True)
    assert first != INVALID_SESSION_ID
    assert sessions.get(small) is None and sessions.get(large) is not None
    second = open_session(sessions, [A, B], privileged=True)
    assert sessions.get(large) is None and sessions.evictions == 2
    # Followers' young sessions are safe from everyone.
    assert open_session(sessions, [A, B, C], privileged=True) == INVALID_SESSION_ID
    assert open_session(sessions, [A, B, C]) == INVALID_SESSION_ID
    # Old (but in use) follower sessions: only a follower at least as large evicts one,
    # the smallest; consumers never do.
    clock.now_s += EVICTION_MS / 1000 / 2
    sessions.new_context(first, 1, True, False, [], [])
    sessions.new_context(second, 1, True, False, [], [])
    clock.now_s += EVICTION_MS / 1000 / 2 + 1
    assert open_session(sessions, [A, B, C]) == INVALID_SESSION_ID
    assert open_session(sessions, [C], privileged=True) == INVALID_SESSION_ID  # ties lose
    third = open_session(sessions, [B, C], privileged=True)
    assert third != INVALID_SESSION_ID and sessions.get(first) is None
    # A session unused for EVICTION_MS goes to anyone, the least recently used first.
    clock.now_s += EVICTION_MS / 1000 + 1
    assert open_session(sessions, [A]) != INVALID_SESSION_ID
    assert sessions.get(second) is None and sessions.get(third) is not None
    assert len(sessions) == 2 and sessions.evictions == 4


def test_the_partitions_all_sessions_remember_are_bounded(monkeypatch: MonkeyPatch) -> None:
    monkeypatch.setattr(fetch_session, "CACHED_PARTITIONS_MAX", 3)
    sessions = cache()
    first = open_session(sessions, [A, B])
    assert open_session(sessions, [A, B]) == INVALID_SESSION_ID  # 4 > 3: sessionless
    assert sessions.total_partitions == 2
    grown = sessions.new_context(first, 1, False, False, [(C, ask())], [])
    assert grown.respond([seen()] * 3).session_id == first  # 3: still fits
    # An incremental fetch growing past the bound closes its session: a sessionless answer
    # for what it named, and the client starts over with a full fetch.
    context = sessions.new_context(first, 2, False, False, [(("v", 0), ask())], [])
    assert context.partitions == [(("v", 0), ask())]
    assert context.respond([seen()]).session_id == INVALID_SESSION_ID
    assert sessions.get(first) is None and sessions.total_partitions == 0


def test_a_cache_of_zero_slots_never_keeps_a_session() -> None:
    sessions = cache(slots=0)
    assert open_session(sessions, [A], privileged=True) == INVALID_SESSION_ID


def test_session_ids_come_from_the_injected_random() -> None:
    first = [open_session(cache(), [A]) for _ in range(2)]
    assert first[0] == first[1]  # same seed, same id: a simulated run replays


# ---- the fetching side ------------------------------------------------------------------


def test_the_handler_sends_everything_first_then_only_changes_and_forgets_the_dropped() -> None:
    handler = FetchSessionHandler()
    full = handler.build({A: ask(0), B: ask(0)})
    assert full.full and (full.session_id, full.epoch) == (0, 0) and list(full.to_send) == [A, B]
    assert handler.handle_response(ErrorCode.none, 42, [A, B])
    incremental = handler.build({A: ask(5), C: ask(0)})
    assert (incremental.session_id, incremental.epoch) == (42, 1)
    assert incremental.to_send == {A: ask(5), C: ask(0)} and incremental.to_forget == (B,)
    assert handler.handle_response(ErrorCode.none, 42, [A])
    assert handler.build({A: ask(5), C: ask(0)}).to_send == {}
    assert handler.epoch == 2


def test_the_handler_falls_back_to_a_full_fetch_on_session_errors_and_failures() -> None:
    handler = FetchSessionHandler()
    handler.build({A: ask()})
    handler.handle_response(ErrorCode.none, 42, [A])
    handler.build({A: ask()})
    assert not handler.handle_response(ErrorCode.invalid_fetch_session_epoch, 0, [])
    closing = handler.build({A: ask()})
    assert (closing.session_id, closing.epoch, closing.full) == (42, 0, True)  # closes 42
    assert handler.handle_response(ErrorCode.none, 43, [A])
    handler.build({A: ask()})
    assert not handler.handle_response(ErrorCode.fetch_session_id_not_found, 0, [])
    assert (handler.build({A: ask()}).session_id, handler.epoch) == (0, 0)
    handler.handle_response(ErrorCode.none, 44, [A])
    handler.build({A: ask()})
    handler.handle_error()
    assert handler.build({A: ask()}).full
    # An answer for a partition the session lacks is not trusted.
    handler.handle_response(ErrorCode.none, 45, [A])
    handler.build({A: ask()})
    assert not handler.handle_response(ErrorCode.none, 45, [B])
    assert handler.build({A: ask()}).full


def test_a_leader_without_room_keeps_the_handler_on_full_fetches() -> None:
    handler = FetchSessionHandler()
    handler.build({A: ask()})
    assert handler.handle_response(ErrorCode.none, INVALID_SESSION_ID, [A])
    assert handler.build({A: ask()}).full


# ---- model: incremental answers carry what full answers would ----------------------------


@dataclass
class ServerPartition:
    high_watermark: int = 0
    log_start_offset: int = 0
    error: int = ErrorCode.none

    def read(self, request: PartitionRequest) -> PartitionAnswer:
        if self.error != ErrorCode.none:
            # Some errors carry the watermarks: the session must not take them as news.
            hw = self.high_watermark
            return PartitionAnswer(0, hw, hw, self.log_start_offset, self.error)
        available = max(0, self.high_watermark - request.fetch_offset)
        return PartitionAnswer(
            available, self.high_watermark, self.high_watermark, self.log_start_offset
        )


KEYS: list[PartitionKey] = [("t", 0), ("t", 1), (uuid.UUID(int=3), 0), ("u", 2)]

step = st.one_of(
    st.tuples(st.just("append"), st.sampled_from(KEYS), st.integers(1, 3)),
    st.tuples(st.just("delete"), st.sampled_from(KEYS), st.integers(1, 2)),
    st.tuples(st.just("error"), st.sampled_from(KEYS), st.booleans()),
    st.tuples(st.just("want"), st.sampled_from(KEYS), st.booleans()),
    st.tuples(st.just("fetch"), st.just(KEYS[0]), st.just(0)),
    st.tuples(st.just("lose"), st.just(KEYS[0]), st.just(0)),  # a request lost in flight
)


def state(answer: PartitionAnswer | None) -> PartitionAnswer | None:
    return None if answer is None else dataclasses.replace(answer, records_bytes=0)


@dataclass
class Client:
    wanted: dict[PartitionKey, int] = field(default_factory=dict)  # key -> fetch offset
    view: dict[PartitionKey, PartitionAnswer] = field(default_factory=dict)


@settings(max_examples=150, deadline=None)
@given(st.lists(step, min_size=1, max_size=40), st.integers(0, 2))
@example(  # an error that clears with the watermarks unchanged must still be heard
    [("fetch", KEYS[0], 0), ("error", KEYS[0], 1), ("fetch", KEYS[0], 0), ("error", KEYS[0], 0)],
    1,
)
@example(  # the first fetch ever answers an error, then the error clears
    [("error", KEYS[0], 1), ("fetch", KEYS[0], 0), ("error", KEYS[0], 0)],
    1,
)
def test_incremental_answers_tell_the_fetcher_what_full_answers_would(
    steps: list[tuple[str, PartitionKey, int]], slots: int
) -> None:
    server = {key: ServerPartition() for key in KEYS}
    sessions = cache(slots=slots)
    handler = FetchSessionHandler()
    client = Client({KEYS[0]: 0})
    for action, key, amount in [*steps, ("fetch", KEYS[0], 0)]:
        if action == "append":
            server[key].high_watermark += amount
        elif action == "delete":
            part = server[key]
            part.log_start_offset = min(part.high_watermark, part.log_start_offset + amount)
        elif action == "error":
            server[key].error = ErrorCode.not_leader_or_follower if amount else ErrorCode.none
        elif action == "want":
            if amount:
                client.wanted.setdefault(key, 0)
            else:
                client.wanted.pop(key, None)
                client.view.pop(key, None)
        elif action in ("fetch", "lose"):
            if not client.wanted:
                continue
            wanted = {k: ask(offset) for k, offset in client.wanted.items()}
            data = handler.build(wanted)
            context = sessions.new_context(
                data.session_id,
                data.epoch,
                False,
                False,
                list(data.to_send.items()),
                list(data.to_forget),
            )
            answers = [server[k].read(request) for k, request in context.partitions]
            result = context.respond(answers)
            assert sessions.total_partitions == sum(
                len(s.partitions) for s in sessions._sessions.values()
            )
            if action == "lose":
                handler.handle_error()
                continue
            answered = {context.partitions[i][0]: answers[i] for i in result.selected}
            assert handler.handle_response(result.error, result.session_id, answered)
            client.view.update(answered)
            # What a sessionless full fetch of the same state would have said:
            truth = {k: server[k].read(request) for k, request in wanted.items()}
            # The partition state the fetcher knows is the state; records are never left out.
            assert {k: state(client.view.get(k)) for k in wanted} == {
                k: state(a) for k, a in truth.items()
            }
            for k, answer in truth.items():
                if answer.records_bytes:
                    assert answered[k] == answer  # data is never left out
                    client.wanted[k] = server[k].high_watermark  # consumed


# ---- the data plane: Fetch requests through the wire codec --------------------------------

TOPIC_ID = uuid.UUID(int=77)


@dataclass
class Leader:
    """Just enough ReplicaManager for data_plane.fetch: topic ``t``, two partitions."""

    log_end: dict[tuple[str, int], int] = field(default_factory=lambda: {("t", 0): 0, ("t", 1): 0})
    waits: int = 0
    topic_metrics: None = None  # no metrics counted (data_plane reads it)

    def read(self, topic: str, index: int, offset: int, *_: object, **__: object) -> ReadResult:
        end = self.log_end.get((topic, index))
        if end is None:
            return ReadResult(ErrorCode.not_leader_or_follower)
        return ReadResult(ErrorCode.none, end, 0, b"\1" * (end - offset))

    async def wait_for_changes(self, keys: object, timeout_s: float) -> list[object]:
        self.waits += 1
        return []


def fetch(
    leader: Leader, sessions: FetchSessionCache, version: int, values: dict[str, object]
) -> Any:
    """A consumer's Fetch of ``version``, answered and decoded as the client would."""
    module: Any = request_module(1, version)
    by_id = version >= 13
    topics = tuple(
        make(
            module.FetchTopic,
            {
                ("topic_id" if by_id else "topic"): ref,
                "partitions": tuple(
                    make(
                        module.FetchPartition,
                        {"partition": p, "fetch_offset": o, "partition_max_bytes": 1 << 20},
                    )
                    for p, o in parts
                ),
            },
        )
        for ref, parts in values.pop("topics", ())  # type: ignore[attr-defined]
    )
    forgotten = tuple(
        make(module.ForgottenTopic, {("topic_id" if by_id else "topic"): ref, "partitions": ps})
        for ref, ps in values.pop("forgotten", ())  # type: ignore[attr-defined]
    )
    request = make(
        module.FetchRequest,
        {
            "max_wait": timedelta(seconds=30),
            "min_bytes": 1,
            "topics": topics,
            "forgotten_topics_data": forgotten,
            **values,
        },
    )

    async def answer() -> object:
        names = {TOPIC_ID: "t"}
        return await data_plane.fetch(leader, sessions, names.get, request, version)  # type: ignore[arg-type]

    response = asyncio.run(answer())
    header = wire.RequestHeader(1, version, 9, "client")
    return wire.decode_response(1, version, wire.encode_response(header, response)[4:])[1]


def answered(response: Any) -> list[tuple[object, int, int]]:
    """(topic, partition, high watermark) of every partition answered."""
    return [
        (getattr(t, "topic_id", None) or t.topic, p.partition_index, p.high_watermark)
        for t in response.responses
        for p in t.partitions
    ]


def test_fetch_v13_keeps_a_session_by_topic_id_and_answers_only_what_changed() -> None:
    leader, sessions = Leader(), cache()
    leader.log_end[("t", 0)] = 2
    first = fetch(
        leader, sessions, 13, {"session_epoch": 0, "topics": [(TOPIC_ID, [(0, 0), (1, 0)])]}
    )
    assert first.error_code == ErrorCode.none and first.session_id != INVALID_SESSION_ID
    assert answered(first) == [(TOPIC_ID, 0, 2), (TOPIC_ID, 1, 0)]
    assert sessions.get(first.session_id).uses_topic_ids  # type: ignore[union-attr]
    leader.log_end[("t", 1)] = 1
    # Incremental, moving partition 0's offset to 2: only partition 1 has news.
    second = fetch(
        leader,
        sessions,
        13,
        {
            "session_id": first.session_id,
            "session_epoch": 1,
            "topics": [(TOPIC_ID, [(0, 2)])],
        },
    )
    assert (second.error_code, second.session_id) == (ErrorCode.none, first.session_id)
    assert answered(second) == [(TOPIC_ID, 1, 1)]
    # The same session from a v12 request: refused, at once (no long poll), nothing read.
    waits = leader.waits
    mixed = fetch(leader, sessions, 12, {"session_id": first.session_id, "session_epoch": 2})
    assert mixed.error_code == ErrorCode.fetch_session_topic_id_error and mixed.responses == ()
    stale = fetch(leader, sessions, 13, {"session_id": first.session_id, "session_epoch": 1})
    assert stale.error_code == ErrorCode.invalid_fetch_session_epoch
    lost = fetch(leader, sessions, 13, {"session_id": first.session_id + 1, "session_epoch": 1})
    assert lost.error_code == ErrorCode.fetch_session_id_not_found
    assert leader.waits == waits


def test_fetch_v13_answers_an_unknown_topic_id_with_unknown_topic_id() -> None:
    leader, sessions = Leader(), cache()
    unknown = uuid.UUID(int=5)
    response = fetch(leader, sessions, 13, {"topics": [(unknown, [(0, 0)])]})
    (topic,) = response.responses
    assert topic.topic_id == unknown
    assert topic.partitions[0].error_code == ErrorCode.unknown_topic_id


def test_a_sessionless_v12_fetch_and_forgotten_topics_by_name() -> None:
    leader, sessions = Leader(), cache()
    leader.log_end[("t", 1)] = 3
    full = fetch(leader, sessions, 12, {"topics": [("t", [(0, 0), (1, 0)])]})
    assert full.session_id == INVALID_SESSION_ID and len(sessions) == 0
    assert answered(full) == [("t", 0, 0), ("t", 1, 3)]
    opened = fetch(leader, sessions, 12, {"session_epoch": 0, "topics": [("t", [(0, 0), (1, 0)])]})
    forgot = fetch(
        leader,
        sessions,
        12,
        {"session_id": opened.session_id, "session_epoch": 1, "forgotten": [("t", (1,))]},
    )
    session = sessions.get(opened.session_id)
    assert session is not None and list(session.partitions) == [("t", 0)]
    assert forgot.responses == ()  # partition 0: nothing new; partition 1: forgotten


def test_a_full_cache_answers_a_full_fetch_in_full_with_session_id_zero() -> None:
    """What operations.md promises a client at the limit: Kafka's sessionless answer."""
    leader, sessions = Leader(), cache(slots=0)
    leader.log_end[("t", 0)] = 1
    response = fetch(
        leader, sessions, 12, {"session_epoch": 0, "topics": [("t", [(0, 0), (1, 0)])]}
    )
    assert (response.error_code, response.session_id) == (ErrorCode.none, INVALID_SESSION_ID)
    assert answered(response) == [("t", 0, 1), ("t", 1, 0)]
    assert len(response.responses[0].partitions[0].records) == 1
