"""The WGL search and its counterexamples, on hand-written and generated histories."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.analysis.linearizability import explain, search
from sim.analysis.models import EchoModel, Model, Operation, RegisterModel, SetModel, TopicModel


class History:
    """Builds operations with trace sequence numbers from a readable script."""

    def __init__(self) -> None:
        self.ops: list[Operation] = []
        self.seq = 0

    def call(self, process: str, f: str, value: Any = None) -> int:
        self.seq += 1
        op = Operation(
            id=len(self.ops),
            index=len(self.ops),
            process=process,
            f=f,
            input=value,
            output=None,
            status="pending",
            error=None,
            invoke_us=self.seq * 1000,
            complete_us=None,
            invoke_seq=self.seq,
            complete_seq=None,
        )
        self.ops.append(op)
        return op.id

    def ret(self, op_id: int, output: Any = None, status: str = "ok", error: str | None = None):
        self.seq += 1
        self.ops[op_id] = replace(
            self.ops[op_id],
            output=output,
            status=status,
            error=error,
            complete_us=self.seq * 1000,
            complete_seq=self.seq,
        )

    def run(self, process: str, f: str, value: Any = None, output: Any = None, **kw: Any) -> int:
        op_id = self.call(process, f, value)
        self.ret(op_id, output, **kw)
        return op_id

    def observed(self, model: Model) -> list[Operation]:
        kept = [op for op in self.ops if model.observes(op)]
        return [replace(op, id=i) for i, op in enumerate(kept)]


def verdict(model: Model, history: History) -> str:
    return search(model, history.observed(model)).verdict


def test_concurrent_register_history_is_linearizable() -> None:
    h = History()
    w1 = h.call("a", "write", 1)
    r = h.call("b", "read")
    h.ret(w1)
    w2 = h.call("c", "write", 2)
    h.ret(r, 1)  # the read may have seen write 1 before write 2 took effect
    h.ret(w2)
    h.run("b", "read", output=2)
    assert verdict(RegisterModel(), h) == "ok"


def test_stale_read_is_reported_at_the_first_read_no_order_explains() -> None:
    h = History()
    h.run("a", "write", 1)
    h.run("a", "write", 2)
    h.run("b", "read", output=2)
    stale = h.run("b", "read", output=1)
    h.run("c", "read", output=1)  # also wrong, but later: not the minimal counterexample
    model = RegisterModel()
    ops = h.observed(model)
    assert search(model, ops).verdict == "violation"
    found = explain(model, ops)
    assert found is not None
    assert found.op.index == stale
    assert found.state == "2"
    assert "#3 b read() -> 1" in found.message("k")
    assert [o.index for o in found.linearized_tail] == [0, 1, 2]


def test_operation_of_unknown_outcome_may_or_may_not_have_happened() -> None:
    model = RegisterModel(initial=0)
    seen = History()
    w = seen.call("a", "write", 5)  # never completes: its client crashed
    seen.run("b", "read", output=5)
    seen.run("b", "read", output=5)
    assert verdict(model, seen) == "ok"
    unseen = History()
    unseen.call("a", "write", 5)
    unseen.run("b", "read", output=0)
    assert verdict(model, unseen) == "ok"
    assert w == 0


def test_unknown_write_cannot_take_effect_before_it_was_invoked() -> None:
    h = History()
    h.run("b", "read", output=5)
    h.call("a", "write", 5)
    assert verdict(RegisterModel(initial=0), h) == "violation"


def test_failed_operations_did_not_happen() -> None:
    h = History()
    h.run("a", "write", 3, status="fail", error="NOT_LEADER")
    h.run("b", "read", output=None)
    assert verdict(RegisterModel(), h) == "ok"


def test_compare_and_set() -> None:
    h = History()
    h.run("a", "write", 1)
    h.run("b", "cas", (1, 2))
    h.run("c", "cas", (1, 3), status="fail")
    h.run("a", "read", output=2)
    assert verdict(RegisterModel(), h) == "ok"
    h.run("d", "cas", (1, 4))  # acknowledged, but the register held 2
    assert verdict(RegisterModel(), h) == "violation"


def test_set_reads_must_show_every_completed_add() -> None:
    h = History()
    h.run("a", "add", 1)
    add = h.call("b", "add", 2)
    h.run("c", "read", output=(1,))
    h.ret(add)
    h.run("c", "read", output=(1, 2))
    assert verdict(SetModel(), h) == "ok"
    h.run("c", "read", output=(2,))
    assert verdict(SetModel(), h) == "violation"


def test_echo_reply_must_match_its_request() -> None:
    h = History()
    h.run("n1:1", "echo", 1, output=1)
    h.run("n1:1", "echo", 2, output="n2|n1.1.7")
    found = explain(EchoModel(), h.observed(EchoModel()))
    assert found is not None and found.op.input == 2


def test_topic_errors_are_observations() -> None:
    h = History()
    first = h.call("a", "create", 3)
    second = h.call("b", "create", 3)
    h.ret(first)
    h.ret(second, status="fail", error="TOPIC_ALREADY_EXISTS")
    h.run("a", "create-partitions", 5)
    h.run("b", "create-partitions", 4, status="fail", error="INVALID_PARTITIONS")
    h.run("a", "delete")
    h.run("b", "delete", status="fail", error="UNKNOWN_TOPIC_OR_PARTITION")
    h.run("c", "create", 1, status="fail", error="NOT_CONTROLLER")  # not applied, not checked
    assert verdict(TopicModel(), h) == "ok"

    both = History()
    a = both.call("a", "create", 3)
    b = both.call("b", "create", 3)
    both.ret(a)
    both.ret(b)
    found = explain(TopicModel(), both.observed(TopicModel()))
    assert found is not None
    assert found.state == "3 partitions"


def test_topic_errors_say_what_holds_after_a_retried_request() -> None:
    # A broker retried a create across a controller failover: its first attempt took
    # effect, the retry answered TOPIC_ALREADY_EXISTS. Nobody else touched the topic.
    retried = History()
    retried.run("a", "create", 1, status="fail", error="TOPIC_ALREADY_EXISTS")
    retried.run("final", "read", output=1)
    assert verdict(TopicModel(), retried) == "ok"
    # ... but "already exists" still says the topic exists afterwards.
    lost = History()
    lost.run("a", "create", 1, status="fail", error="TOPIC_ALREADY_EXISTS")
    lost.run("final", "read", output=None)
    assert verdict(TopicModel(), lost) == "violation"
    # An acknowledged create the log lost: the final read catches it.
    dropped = History()
    dropped.run("a", "create", 1)
    dropped.run("final", "read", output=None)
    assert verdict(TopicModel(), dropped) == "violation"
    # Growing a topic that is absent cannot be answered INVALID_PARTITIONS.
    absent = History()
    absent.run("a", "create-partitions", 3, status="fail", error="INVALID_PARTITIONS")
    assert verdict(TopicModel(), absent) == "violation"


def test_search_gives_up_within_its_step_budget() -> None:
    h = History()
    calls = [h.call(f"p{i}", "write", i) for i in range(8)]
    for op_id in calls:
        h.ret(op_id)
    h.run("r", "read", output=99)
    result = search(RegisterModel(), h.observed(RegisterModel()), max_steps=50)
    assert result.verdict == "unknown"


@st.composite
def sequential_register_histories(draw: st.DrawFn) -> list[tuple[str, int | None]]:
    steps = draw(st.lists(st.tuples(st.booleans(), st.integers(0, 3)), min_size=1, max_size=30))
    return [("write", v) if is_write else ("read", None) for is_write, v in steps]


@settings(max_examples=60, deadline=None)
@given(sequential_register_histories(), st.integers(0, 10_000))
def test_histories_produced_by_the_model_are_linearizable_and_a_lie_is_not(
    steps: list[tuple[str, int | None]], pick: int
) -> None:
    h, value, reads = History(), None, []
    for i, (f, argument) in enumerate(steps):
        if f == "write":
            value = argument
            h.run(f"p{i % 3}", "write", argument)
        else:
            reads.append(h.run(f"p{i % 3}", "read", output=value))
    assert verdict(RegisterModel(), h) == "ok"
    if reads:
        lie = reads[pick % len(reads)]
        h.ops[lie] = replace(h.ops[lie], output=99)
        ops = h.observed(RegisterModel())
        assert search(RegisterModel(), ops).verdict == "violation"
        found = explain(RegisterModel(), ops)
        assert found is not None and found.op.index == lie


def test_config_changes_are_checked_with_the_topic_they_belong_to() -> None:
    # An acknowledged config change the log lost: the final read-config catches it.
    lost = History()
    lost.run("a", "create", 1)
    lost.run("a", "alter-config", 3_600_001)
    lost.run("final", "read", output=1)
    lost.run("final", "read-config", output=None)
    assert verdict(TopicModel(), lost) == "violation"
    found = explain(TopicModel(), lost.observed(TopicModel()))
    assert found is not None and found.state == "1 partitions, retention.ms=3600001"
    # The same history with the change kept, or a later change overwriting it, is fine.
    kept = History()
    kept.run("a", "create", 1)
    kept.run("a", "alter-config", 3_600_001)
    kept.run("b", "alter-config", 3_600_002, status="info", error="NOT_CONTROLLER")
    kept.run("final", "read-config", output=3_600_002)
    assert verdict(TopicModel(), kept) == "ok"
    # A delete takes the topic's configs with it; a re-created topic has none.
    recreated = History()
    recreated.run("a", "create", 1)
    recreated.run("a", "alter-config", 3_600_001)
    recreated.run("b", "delete")
    recreated.run("b", "create", 2)
    recreated.run("final", "read-config", output=3_600_001)
    assert verdict(TopicModel(), recreated) == "violation"
    # UNKNOWN_TOPIC_OR_PARTITION says the topic was absent; INVALID_CONFIG changes nothing.
    absent = History()
    absent.run("a", "create", 1)
    absent.run("b", "alter-config", 3_600_001, status="fail", error="UNKNOWN_TOPIC_OR_PARTITION")
    assert verdict(TopicModel(), absent) == "violation"
    refused = History()
    refused.run("a", "create", 1)
    refused.run("b", "alter-config", -7, status="fail", error="INVALID_CONFIG")
    refused.run("final", "read-config", output=None)
    assert verdict(TopicModel(), refused) == "ok"


# ---- the search against a brute-force oracle ----------------------------------------------


def brute_force(model: Model, ops: list[Operation]) -> bool:
    """Linearizable by definition: some order of the acknowledged operations and a subset of
    the unknown ones, each placed after every operation that returned before it was called,
    that the model accepts. Exponential: for histories of a handful of operations."""
    must = frozenset(op.id for op in ops if op.determinate)
    seen: set[tuple[frozenset[int], Any]] = set()

    def extend(placed: frozenset[int], state: Any) -> bool:
        if must <= placed:
            return True
        if (placed, state) in seen:
            return False
        seen.add((placed, state))
        for op in ops:
            if op.id in placed:
                continue
            before = all(
                other.id in placed
                for other in ops
                if other.complete_seq is not None and other.complete_seq < op.invoke_seq
            )
            if not before:
                continue
            legal, after = model.step(state, op)
            if legal and extend(placed | {op.id}, after):
                return True
        return False

    return extend(frozenset(), model.init())


@st.composite
def register_histories(draw: st.DrawFn) -> list[Operation]:
    """Up to 7 register operations, overlapping at random, some of unknown outcome; reads
    and cas results drawn freely, so some histories are linearizable and some are not."""
    count = draw(st.integers(1, 7))
    h = History()
    open_ops: list[int] = []
    for i in range(count):
        f = draw(st.sampled_from(["write", "read", "cas"]))
        value = draw(st.integers(0, 2)) if f == "write" else None
        if f == "cas":
            value = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
        open_ops.append(h.call(f"p{i}", f, value))
        while open_ops and draw(st.booleans()):
            op_id = open_ops.pop(draw(st.integers(0, len(open_ops) - 1)))
            _finish(h, op_id, draw)
    for op_id in open_ops:
        _finish(h, op_id, draw)
    return h.observed(RegisterModel(initial=0))


def _finish(h: History, op_id: int, draw: st.DrawFn) -> None:
    status = draw(st.sampled_from(["ok", "ok", "ok", "info", "fail"]))
    if status == "info":
        h.ops[op_id] = replace(h.ops[op_id], status="info", error="TimeoutError")
        return
    output = draw(st.integers(0, 2)) if h.ops[op_id].f == "read" else None
    h.ret(op_id, output, status=status)


@settings(max_examples=300, deadline=None)
@given(register_histories())
def test_the_search_agrees_with_brute_force_on_small_histories(ops: list[Operation]) -> None:
    model = RegisterModel(initial=0)
    result = search(model, ops)
    assert result.verdict == ("ok" if brute_force(model, ops) else "violation")
    if result.verdict == "ok":  # the linearization it found is one the model accepts
        state = model.init()
        for op_id in result.linearization:
            legal, state = model.step(state, ops[op_id])
            assert legal


@st.composite
def linearizable_topic_histories(draw: st.DrawFn) -> list[tuple[int, int, str, Any, str]]:
    """Topic operations on one key, each taking effect at its own point inside its interval
    (so the history is linearizable by construction), many of unknown outcome, as a failover
    leaves them: (invoke time, complete time, function, argument, status) events."""
    events = []
    for i in range(draw(st.integers(1, 40))):
        f = draw(st.sampled_from(["create", "delete", "create-partitions", "alter-config"]))
        argument = None if f == "delete" else draw(st.integers(1, 4))
        # A few acknowledged operations overlap at a time, as six client lanes make them
        # (a history of 40 all concurrent is exponential for any search); unknown ones stay
        # open to the end.
        start = 30 * i + draw(st.integers(0, 40))
        length = draw(st.integers(1, 60))
        status = draw(st.sampled_from(["ok", "ok", "info"]))
        events.append((start, start + length, f, argument, status))
    return events


@settings(max_examples=60, deadline=None)
@given(linearizable_topic_histories(), st.integers(0, 10_000))
def test_linearizable_histories_pass_and_a_planted_lie_is_found(
    events: list[tuple[int, int, str, Any, str]], pick: int
) -> None:
    # Apply each operation at its midpoint; it is acknowledged with the answer it got then.
    model = TopicModel()
    state = model.init()
    calls: list[tuple[int, int, Operation]] = []
    for start, end, f, argument, status in sorted(events, key=lambda e: (e[0] + e[1]) / 2):
        probe = Operation(0, 0, "p", f, argument, None, "ok", None, 0, 0, 0, 0)
        legal, after = model.step(state, probe)
        error = None
        if not legal:  # answered with the error that says what held
            status = "fail"
            if f == "create":
                error = "TOPIC_ALREADY_EXISTS"
            elif state is None:
                error = "UNKNOWN_TOPIC_OR_PARTITION"
            else:
                error = "INVALID_PARTITIONS"
        # An unknown outcome took effect or not: a deterministic coin from the example.
        elif status == "ok" or (pick + start) % 2 == 0:
            state = after
        calls.append((start, end, replace(probe, status=status, error=error)))
    h = History()
    timeline = [(start, 0, i) for i, (start, _, _) in enumerate(calls)]
    timeline += [(end, 1, i) for i, (_, end, op) in enumerate(calls) if op.status != "info"]
    ids: dict[int, int] = {}
    for _, is_return, i in sorted(timeline):
        op = calls[i][2]
        if is_return:
            h.ret(ids[i], None, status=op.status, error=op.error)
        else:
            ids[i] = h.call(f"p{i}", op.f, op.input)
            if op.status == "info":
                h.ops[ids[i]] = replace(h.ops[ids[i]], status="info")
    partitions = None if state is None else state[0]
    h.run("final", "read", output=partitions)
    assert verdict(model, h) == "ok"
    # A final read of a partition count nothing ever set: no linearization explains it.
    h.ops[-1] = replace(h.ops[-1], output=99)
    assert verdict(model, h) == "violation"


def test_many_unknown_operations_stay_cheap() -> None:
    # The shape of the metadata scenario's seed 21: a failover leaves unknown creates, grows
    # and deletes on one topic, then a long acknowledged history follows. Without pruning,
    # each subset of the unknown ones is a configuration of its own (2^16 here, times every
    # position and state); refuting the final read must explore all that remain.
    h = History()
    for i in range(16):
        f, argument = [("create", 1 + i % 3), ("create-partitions", 2 + i % 4), ("delete", None)][
            i % 3
        ]
        h.call(f"u{i}", f, argument)
        h.ops[-1] = replace(h.ops[-1], status="info", error="TimeoutError")
    for i in range(30):
        h.run("a", "create", 2)
        h.run("a", "create-partitions", 3 + i % 3)
        h.run("b", "delete")
    h.run("final", "read", output=None)
    assert search(TopicModel(), h.observed(TopicModel()), max_steps=20_000).verdict == "ok"
    h.ops[-1] = replace(h.ops[-1], output=7)
    refuted = search(TopicModel(), h.observed(TopicModel()), max_steps=1_000_000)
    assert refuted.verdict == "violation"
