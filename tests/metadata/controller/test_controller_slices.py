"""The controller works on a big CreateTopics, DeleteTopics or (Incremental)AlterConfigs a
slice of its entities at a time.

On main, a CreateTopics with validate_only naming 200,000 topics was one step of the
controller's loop (44 s of CPU on a loaded host: the quorum failed over four times), and a
DeleteTopics of 200,000 names 27 s. Now TOPICS_PER_SLICE topics are worked on per turn of
the loop, each slice's records proposed before the next, and the answer is the one a
single pass gives: every name answered, in order, duplicates and the record budget counted
over the whole request. The tests count the names each turn of the loop works on (the CPU
a turn takes is printed by bench/bench_slices.py).
"""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from metadata.controller.configs import AlterConfigsRun
from metadata.controller.context import MAX_RECORDS_PER_USER_OP, EntityRun
from metadata.controller.partitions import ElectLeadersRun
from metadata.controller.topics import TOPICS_PER_SLICE, CreateTopicsRun, DeleteTopicsRun
from protocol.entities import make
from protocol.turns import SLICE_ENTITIES
from tests.loop_turns import busy, counting, most, work_per_turn
from tests.metadata.controller.support import request_module, roundtrip
from tests.metadata.controller.test_acls import creation, filter_values
from tests.metadata.controller.test_quorum_controller import Controller, run

NAMES = 20_000
MISSING = 100_000  # names DeleteTopics looks up


def count_names(
    monkeypatch: pytest.MonkeyPatch,
    run_class: type[CreateTopicsRun] | type[DeleteTopicsRun],
    tally: Counter[str],
) -> None:
    """Every name a CreateTopicsRun or DeleteTopicsRun works on counts in tally["names"]."""
    step = counting(tally, "names", lambda _run, _ctx, topics: len(topics), run_class.step)
    monkeypatch.setattr(run_class, "step", step)


def creatable(module: Any, name: str) -> Any:
    return module.CreatableTopic(
        name=name, num_partitions=1, replication_factor=1, assignments=(), configs=()
    )


def test_a_create_topics_of_20000_names_is_worked_on_in_slices(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = request_module(19, 7)
    names = [f"t{i}" for i in range(NAMES)] + ["t7"]  # one duplicate, far from its first
    request = module.CreateTopicsRequest(
        topics=tuple(creatable(module, n) for n in names), validate_only=True
    )

    tally: Counter[str] = Counter()

    async def scenario() -> tuple[list[Counter[str]], Any, int]:
        node = Controller(tmp_path)
        await node.start()
        await node.heartbeat(1, await node.register(1), offset=node.image.offset)
        count_names(monkeypatch, CreateTopicsRun, tally)
        turns, response = await work_per_turn(node.controller.handle(19, 7, request), tally)
        topics = len(node.image.topics.by_name)
        await node.stop()
        return turns, roundtrip(response), topics

    turns, response, topics = run(scenario())
    assert NAMES > 10 * TOPICS_PER_SLICE and topics == 0  # validate_only wrote nothing
    # Every name worked on once, at most TOPICS_PER_SLICE of them per turn of the loop.
    assert tally["names"] == len(names)
    assert most(turns, "names") == TOPICS_PER_SLICE
    assert busy(turns, "names") == -(-len(names) // TOPICS_PER_SLICE) > 10
    codes = [(r.name, r.error_code) for r in response.topics]
    assert [name for name, _ in codes] == names
    assert codes[7] == ("t7", ErrorCode.invalid_request) == codes[-1]
    ok = sum(code == ErrorCode.none for _, code in codes)
    assert ok == MAX_RECORDS_PER_USER_OP // 2  # two records a topic, then POLICY_VIOLATION
    assert codes[ok + 1][1] == ErrorCode.policy_violation


def test_a_delete_topics_in_slices_removes_each_topic_once_and_answers_every_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    created = 3 * TOPICS_PER_SLICE
    create_module = request_module(19, 7)
    create = create_module.CreateTopicsRequest(
        topics=tuple(creatable(create_module, f"d{i}") for i in range(created))
    )
    module = request_module(20, 6)
    tally: Counter[str] = Counter()

    async def scenario() -> tuple[list[Counter[str]], Any, int]:
        node = Controller(tmp_path)
        await node.start()
        await node.heartbeat(1, await node.register(1), offset=node.image.offset)
        await node.call(19, 7, create)
        first_id = node.image.topics.by_name["d0"]
        wanted = [module.DeleteTopicState(name=f"d{i}", topic_id=None) for i in range(created)]
        wanted += [module.DeleteTopicState(name=f"m{i}", topic_id=None) for i in range(MISSING)]
        # The first topic again, by id, in a later slice: removed once, answered twice.
        wanted.append(module.DeleteTopicState(name=None, topic_id=first_id))
        request = module.DeleteTopicsRequest(topics=tuple(wanted), timeout=timedelta(seconds=30))
        count_names(monkeypatch, DeleteTopicsRun, tally)
        turns, response = await work_per_turn(node.controller.handle(20, 6, request), tally)
        left = len(node.image.topics.by_name)
        await node.stop()
        return turns, roundtrip(response), left

    turns, response, left = run(scenario())
    assert left == 0
    wanted = created + MISSING + 1
    assert tally["names"] == wanted
    assert most(turns, "names") == TOPICS_PER_SLICE
    assert busy(turns, "names") == -(-wanted // TOPICS_PER_SLICE) > 10
    codes = [r.error_code for r in response.responses]
    assert len(codes) == created + MISSING + 1
    assert codes[:created] == [ErrorCode.none] * created
    assert set(codes[created:-1]) == {ErrorCode.unknown_topic_or_partition}
    assert codes[-1] == ErrorCode.none and response.responses[-1].name == "d0"
    assert response.responses[-1].topic_id != uuid.UUID(int=0)


def test_an_incremental_alter_configs_of_20000_resources_is_worked_on_in_slices(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 22: an IncrementalAlterConfigs (or AlterConfigs) was one step of the
    controller's loop however many resources it named. Now SLICE_ENTITIES configs (a
    resource weighing 1 + its configs) are worked on per turn, each slice's records
    proposed before the next; every resource is answered in order, duplicates counted over
    the whole request, and the existing topics' configs are changed."""
    module = request_module(44, 1)

    def resource(name: str, value: str) -> Any:
        config = module.AlterableConfig(name="retention.ms", config_operation=0, value=value)
        return module.AlterConfigsResource(resource_type=2, resource_name=name, configs=(config,))

    names = ["a", "b"] + [f"missing{i}" for i in range(NAMES)] + ["c", "b"]
    request = module.IncrementalAlterConfigsRequest(
        resources=tuple(resource(name, "9") for name in names), validate_only=False
    )
    tally: Counter[str] = Counter()

    async def scenario() -> tuple[list[Counter[str]], Any, dict[str, dict[str, str]]]:
        node = Controller(tmp_path)
        await node.start()
        await node.heartbeat(1, await node.register(1), offset=node.image.offset)
        for name in ("a", "b", "c"):
            assert (await node.create_topic(name, 1)).error_code == ErrorCode.none
        step = counting(
            tally, "resources", lambda _run, _ctx, items: len(items), AlterConfigsRun.step
        )
        monkeypatch.setattr(AlterConfigsRun, "step", step)
        turns, response = await work_per_turn(node.controller.handle(44, 1, request), tally)
        configs = {name: dict(node.image.configs.get((2, name), {})) for name in "abc"}
        await node.stop()
        return turns, roundtrip(response), configs

    turns, response, configs = run(scenario())
    per_slice = SLICE_ENTITIES // 2  # a resource of one config weighs 2
    assert tally["resources"] == len(names)
    assert most(turns, "resources") == per_slice
    assert busy(turns, "resources") == -(-len(names) // per_slice) > 10
    codes = [(r.resource_name, r.error_code) for r in response.responses]
    assert [name for name, _ in codes] == names
    assert codes[0] == ("a", ErrorCode.none) and codes[-2] == ("c", ErrorCode.none)
    assert codes[1] == ("b", ErrorCode.invalid_request) == codes[-1]  # named twice
    assert {code for _, code in codes[2:-2]} == {ErrorCode.unknown_topic_or_partition}
    assert configs == {"a": {"retention.ms": "9"}, "b": {}, "c": {"retention.ms": "9"}}


def test_an_alter_user_scram_credentials_of_20000_users_is_worked_on_in_slices(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 22: AlterUserScramCredentials (like CreatePartitions and AlterClientQuotas, the
    other EntityRuns) was one step of the controller's loop however many users it named.
    Its changes are now read into each user's, then worked on SLICE_ENTITIES changes a
    turn; a user's two changes far apart in the request are still seen together."""
    module = request_module(51, 0)
    users = [f"u{i}" for i in range(NAMES)]
    deletions = [module.ScramCredentialDeletion(name="twice", mechanism=1)]
    deletions += [module.ScramCredentialDeletion(name=user, mechanism=1) for user in users]
    upsertion = module.ScramCredentialUpsertion(
        name="twice", mechanism=1, iterations=8192, salt=b"s", salted_password=b"p"
    )
    request = module.AlterUserScramCredentialsRequest(
        deletions=tuple(deletions), upsertions=(upsertion,)
    )
    tally: Counter[str] = Counter()

    async def scenario() -> tuple[list[Counter[str]], Any]:
        node = Controller(tmp_path)
        await node.start()
        step = counting(
            tally,
            "changes",
            lambda _run, _ctx, items: sum(len(changes) for _user, changes in items),
            EntityRun.step,
        )
        monkeypatch.setattr(EntityRun, "step", step)
        turns, response = await work_per_turn(node.controller.handle(51, 0, request), tally)
        await node.stop()
        return turns, roundtrip(response)

    turns, response = run(scenario())
    assert tally["changes"] == NAMES + 2
    assert most(turns, "changes") <= SLICE_ENTITIES
    assert busy(turns, "changes") > 10
    codes = [(r.user, r.error_code) for r in response.results]
    assert [user for user, _ in codes] == ["twice", *users]  # in order of first mention
    assert codes[0] == ("twice", ErrorCode.duplicate_resource)  # its two changes, together
    assert {code for _, code in codes[1:]} == {ErrorCode.resource_not_found}


def test_create_and_delete_acls_of_many_entries_are_worked_on_in_slices(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 22: with an authorizer, CreateAcls and DeleteAcls were one step of the
    controller's loop however many creations or filters they named (a DeleteAcls filter
    is a pass over every ACL). Creations are worked on SLICE_ENTITIES a turn, an ACL named
    twice far apart created once; filters as many a turn as make SLICE_ENTITIES matches,
    every ACL a filter matches removed once and listed under each filter matching it."""
    created = 3 * SLICE_ENTITIES
    creations = [creation(name=f"t{i}") for i in range(created)] + [creation(name="t7")]
    create_module = request_module(30, 3)
    create = create_module.CreateAclsRequest(creations=tuple(creations))
    delete_module = request_module(31, 3)

    def by_name(name: str | None) -> Any:
        return make(delete_module.DeleteAclsFilter, filter_values(resource_name_filter=name))

    filters = [by_name(f"t{i}") for i in range(created)] + [by_name(None)]  # the last: all
    delete = delete_module.DeleteAclsRequest(filters=tuple(filters))
    tally: Counter[str] = Counter()

    async def scenario() -> tuple[list[Counter[str]], Any, int, list[Counter[str]], Any, int]:
        node = Controller(tmp_path, acls_enabled=True)
        await node.start()
        step = counting(tally, "items", lambda _run, _ctx, items: len(items), EntityRun.step)
        monkeypatch.setattr(EntityRun, "step", step)
        create_turns, created_answer = await work_per_turn(
            node.controller.handle(30, 3, create), tally
        )
        acls = len(node.image.acls)
        delete_turns, deleted_answer = await work_per_turn(
            node.controller.handle(31, 3, delete), tally
        )
        left = len(node.image.acls)
        await node.stop()
        return (
            create_turns,
            roundtrip(created_answer),
            acls,
            delete_turns,
            roundtrip(deleted_answer),
            left,
        )

    create_turns, created_answer, acls, delete_turns, deleted_answer, left = run(scenario())
    assert acls == created  # t7 once
    assert [r.error_code for r in created_answer.results] == [ErrorCode.none] * (created + 1)
    assert most(create_turns, "items") == SLICE_ENTITIES
    assert busy(create_turns, "items") == 4
    # A filter weighs 1 + the ACLs it is matched against: one filter a turn here.
    assert most(delete_turns, "items") == 1
    assert busy(delete_turns, "items") == created + 1
    assert left == 0
    matched = [len(r.matching_acls) for r in deleted_answer.filter_results]
    # Each ACL removed once, and listed under every filter matching it, as in one pass:
    # the last filter's slice no longer has them in its image.
    assert matched == [1] * created + [created]


def test_an_elect_leaders_of_one_topic_of_many_partitions_is_worked_on_in_slices(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 22: ElectLeaders was one step of the controller's loop however many partitions
    it named. They are now elected SLICE_ENTITIES a turn, and the answer (one topic of
    all of them, as a single pass groups it) made as many a turn; a partition named twice,
    far apart, is elected and answered once."""
    wide = 3 * SLICE_ENTITIES
    module = request_module(43, 2)
    named = [*range(wide), 7, wide]  # 7 again; ``wide`` does not exist
    request = module.ElectLeadersRequest(
        election_type=0,
        topic_partitions=(module.TopicPartitions(topic="e", partitions=tuple(named)),),
        timeout=timedelta(seconds=30),
    )
    tally: Counter[str] = Counter()

    async def scenario() -> tuple[list[Counter[str]], Any]:
        node = Controller(tmp_path)
        await node.start()
        await node.heartbeat(1, await node.register(1), offset=node.image.offset)
        assert (await node.create_topic("e", wide)).error_code == ErrorCode.none
        step = counting(tally, "items", lambda _run, _ctx, items: len(items), ElectLeadersRun.step)
        monkeypatch.setattr(ElectLeadersRun, "step", step)
        turns, response = await work_per_turn(node.controller.handle(43, 2, request), tally)
        await node.stop()
        return turns, roundtrip(response)

    turns, response = run(scenario())
    # Elected: every name; answered: each partition once, then its topic.
    assert tally["items"] == len(named) + (wide + 1) + 1
    assert most(turns, "items") == SLICE_ENTITIES
    assert busy(turns, "items") >= 2 * (wide // SLICE_ENTITIES)
    (topic,) = response.replica_election_results
    results = {r.partition_id: r.error_code for r in topic.partition_result}
    assert len(topic.partition_result) == wide + 1 == len(results)
    assert results[wide] == ErrorCode.unknown_topic_or_partition
    assert {results[p] for p in range(wide)} == {ErrorCode.election_not_needed}
