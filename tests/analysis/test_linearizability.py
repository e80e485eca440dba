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
