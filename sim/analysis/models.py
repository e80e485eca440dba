"""Sequential specifications the linearizability search checks one key's operations against.

A model is a pure state machine over hashable states: ``step(state, op)`` says whether ``op``
could have returned what it returned in ``state``, and what the state is afterwards. An
operation whose outcome is unknown (``not op.determinate``: info or pending) must be
accepted from any state, since nothing was observed. ``observes(op)`` picks the operations
the search must place: by default acknowledged ones and those of unknown outcome; a failed
operation definitely did not take effect, so it is left out, unless its error is itself an
observation (``TopicModel``: "already exists" says the topic existed).

Scenarios choose models per function name in ``sim.analysis.checks.SCENARIOS``.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

State = Hashable


@dataclass(frozen=True, slots=True)
class Operation:
    """One paired operation of one key, as the search sees it."""

    id: int
    index: int
    process: str
    f: str
    input: Any
    output: Any
    status: str
    error: str | None
    invoke_us: int
    complete_us: int | None
    invoke_seq: int
    complete_seq: int | None

    @property
    def determinate(self) -> bool:
        """True when the operation's completion was observed (its return bounds the search)."""
        return self.status in ("ok", "fail")

    def describe(self) -> str:
        """``p n1:2 #17 write(3) -> ok [1.2045s, 1.2071s]`` (virtual seconds)."""
        shown = "?" if self.output is None and not self.determinate else repr(self.output)
        if self.status == "fail":
            shown = f"fail {self.error or ''}".strip()
        end = "..." if self.complete_us is None else f"{self.complete_us / 1e6:.4f}s"
        argument = "" if self.input is None else repr(self.input)
        return (
            f"#{self.index} {self.process} {self.f}({argument}) -> {shown} "
            f"[{self.invoke_us / 1e6:.4f}s, {end}]"
        )


class Model:
    """Base class: subclasses define ``name``, ``functions``, ``init`` and ``step``."""

    name = "model"
    functions: frozenset[str] = frozenset()

    def init(self) -> State:
        raise NotImplementedError

    def step(self, state: State, op: Operation) -> tuple[bool, State]:
        raise NotImplementedError

    def observes(self, op: Operation) -> bool:
        """Whether the search must place ``op`` (failed operations did not happen)."""
        return op.status != "fail"

    def describe_state(self, state: State) -> str:
        return repr(state)


class EchoModel(Model):
    """An echo has no state: an acknowledged echo returns exactly the value it sent."""

    name = "echo"
    functions = frozenset({"echo"})

    def init(self) -> State:
        return None

    def step(self, state: State, op: Operation) -> tuple[bool, State]:
        return (not op.determinate or op.output == op.input), state

    def describe_state(self, state: State) -> str:
        return "(stateless)"


class RegisterModel(Model):
    """A read/write/compare-and-set register; ``cas`` takes ``(expected, new)``."""

    name = "register"
    functions = frozenset({"read", "write", "cas"})

    def __init__(self, initial: Any = None) -> None:
        self.initial = initial

    def init(self) -> State:
        return self.initial

    def step(self, state: State, op: Operation) -> tuple[bool, State]:
        if op.f == "read":
            return (not op.determinate or op.output == state), state
        if op.f == "write":
            return True, op.input
        if op.f == "cas":
            expected, new = op.input
            if not op.determinate:
                # Unknown outcome: it took effect only if it could have.
                return True, new if state == expected else state
            return state == expected, new
        raise ValueError(f"register: unknown function {op.f!r}")


class SetModel(Model):
    """A grow-only set: ``add(v)`` and ``read -> (v, ...)`` of every element."""

    name = "set"
    functions = frozenset({"add", "read"})

    def init(self) -> State:
        return frozenset()

    def step(self, state: State, op: Operation) -> tuple[bool, State]:
        assert isinstance(state, frozenset)
        if op.f == "add":
            return True, state | {op.input}
        if op.f == "read":
            return (not op.determinate or frozenset(op.output) == state), state
        raise ValueError(f"set: unknown function {op.f!r}")

    def describe_state(self, state: State) -> str:
        assert isinstance(state, frozenset)
        return "{" + ", ".join(repr(v) for v in sorted(state, key=repr)) + "}"


# Kafka error codes that are observations of a topic's state, not "nothing happened".
_TOPIC_ERRORS = {
    "TOPIC_ALREADY_EXISTS": ("create",),
    "UNKNOWN_TOPIC_OR_PARTITION": ("delete", "create-partitions", "alter-config"),
    "INVALID_PARTITIONS": ("create-partitions",),
}


class TopicModel(Model):
    """One topic of the metadata log: absent, or present with N partitions and one config.

    The state is None (absent) or ``(partitions, retention)``, where ``retention`` is the
    topic's ``retention.ms`` override (None: not set). ``create(n)`` succeeds only on an
    absent topic and sets no config; ``delete`` only on a present one, and takes its configs
    with it (a RemoveTopic record drops them, as in Kafka); ``create-partitions(n)`` (the new
    total) only when present with fewer than n; ``alter-config(v)`` (IncrementalAlterConfigs
    SET of ``retention.ms``) only on a present topic. ``read`` returns the partition count and
    ``read-config`` the override, each None for an absent topic (the metadata scenario reads
    every topic once at the end, from the healed cluster's image).

    The errors in ``_TOPIC_ERRORS`` are observations of the state *after* the request, not
    before it: Kafka's admin requests are not idempotent and a broker retries a forwarded
    request across a controller failover, so the retry of a create that took effect answers
    TOPIC_ALREADY_EXISTS (likewise UNKNOWN_TOPIC_OR_PARTITION for a delete, INVALID_PARTITIONS
    for a grow). So "already exists" says the topic exists now, perhaps created by this very
    request. An alter-config answered UNKNOWN_TOPIC_OR_PARTITION saw the topic absent (a
    retried alter that had taken effect before a delete changes nothing the delete did not
    undo). Other errors (NOT_CONTROLLER, ...) leave the outcome unknown or say the request
    was refused before any record (INVALID_REPLICATION_FACTOR, INVALID_CONFIG, ...).
    """

    name = "topic"
    functions = frozenset(
        {"create", "delete", "create-partitions", "alter-config", "read", "read-config"}
    )

    def init(self) -> State:
        return None

    def observes(self, op: Operation) -> bool:
        if op.status != "fail":
            return True
        return op.f in _TOPIC_ERRORS.get(op.error or "", ())

    def step(self, state: State, op: Operation) -> tuple[bool, State]:
        assert state is None or isinstance(state, tuple)
        partitions, retention = state if state is not None else (None, None)
        failed = op.status == "fail"
        unknown = op.status in ("info", "pending")
        if op.f == "create":
            if failed:  # TOPIC_ALREADY_EXISTS: present now, perhaps by this very request
                return True, (op.input, None) if state is None else state
            if state is None:
                return True, (op.input, None)
            return unknown, state
        if op.f == "delete":
            if failed:  # UNKNOWN_TOPIC_OR_PARTITION: absent now, perhaps by this request
                return True, None
            return (state is not None or unknown), None
        if op.f == "read":
            return (not op.determinate or op.output == partitions), state
        if op.f == "read-config":
            return (not op.determinate or op.output == retention), state
        if op.f == "create-partitions":
            if failed and op.error == "UNKNOWN_TOPIC_OR_PARTITION":
                return state is None, state
            if failed:  # INVALID_PARTITIONS: at least n now, perhaps by this request
                return state is not None, (max(partitions or 0, op.input), retention)
            if partitions is not None and op.input > partitions:
                return True, (op.input, retention)
            return unknown, state
        if op.f == "alter-config":
            if failed:  # UNKNOWN_TOPIC_OR_PARTITION: absent when it was looked at
                return state is None, state
            if state is not None:
                return True, (partitions, op.input)
            return unknown, state
        raise ValueError(f"topic: unknown function {op.f!r}")

    def describe_state(self, state: State) -> str:
        if state is None:
            return "absent"
        partitions, retention = state
        config = "" if retention is None else f", retention.ms={retention}"
        return f"{partitions} partitions{config}"


class ConfigModel(Model):
    """One key of one config resource that only ``alter-config`` changes (the metadata
    scenario's broker configs): unset (None) or a value. ``alter-broker-config(v)`` sets it,
    ``read-broker-config`` returns it."""

    name = "config"
    functions = frozenset({"alter-broker-config", "read-broker-config"})

    def init(self) -> State:
        return None

    def step(self, state: State, op: Operation) -> tuple[bool, State]:
        if op.f == "alter-broker-config":
            return True, op.input
        if op.f == "read-broker-config":
            return (not op.determinate or op.output == state), state
        raise ValueError(f"config: unknown function {op.f!r}")

    def describe_state(self, state: State) -> str:
        return "unset" if state is None else repr(state)


# The metadata scenario's models, one per kind of key (a topic, a broker config): the
# simulator and kraft-analyze check its history against exactly these.
METADATA_MODELS: tuple[type[Model], ...] = (TopicModel, ConfigModel)
