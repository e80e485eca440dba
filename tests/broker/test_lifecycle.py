"""broker/lifecycle.py against a scripted controller."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from kio.schema.broker_heartbeat.v1 import response as heartbeat_v1
from kio.schema.broker_registration.v4 import response as registration_v4
from kio.schema.errors import ErrorCode

from broker.lifecycle import BrokerLifecycleManager, BrokerState
from log.runtime import real_runtime
from metadata.records import Listener
from protocol.entities import make

WAIT_S = 5.0


class ScriptedController:
    """Answers registrations and heartbeats like the QuorumController, with hooks to fail.

    ``registration_failures`` are raised or answered, in order, before a registration is
    accepted; an accepted registration gets the next epoch from ``epochs``. Heartbeats unfence
    a broker that does not want to be fenced and has replayed its registration, and approve
    controlled shutdown after ``shutdown_after`` heartbeats asking for it.
    """

    def __init__(self, epochs: list[int], registration_failures: list[object] | None = None):
        self.epochs = epochs
        self.registration_failures = list(registration_failures or [])
        self.heartbeat_override: Callable[[Any], ErrorCode | None] = lambda _request: None
        self.shutdown_after: int | None = 1
        self.registrations: list[Any] = []
        self.heartbeats: list[Any] = []
        self.epoch = -1
        self.fenced = True
        self.shutdown_asks = 0
        self._request_seen = asyncio.Event()

    async def until(self, condition: Callable[[], bool]) -> None:
        """Wait, request by request, until ``condition`` holds (bounded by WAIT_S)."""
        async with asyncio.timeout(WAIT_S):
            while not condition():
                self._request_seen.clear()
                await self._request_seen.wait()

    async def send(self, request: Any, timeout_s: float) -> object:
        self._request_seen.set()
        await asyncio.sleep(0)  # a real channel always yields
        if request.__api_key__ == 62:
            self.registrations.append(request)
            if self.registration_failures:
                failure = self.registration_failures.pop(0)
                if isinstance(failure, Exception):
                    raise failure
                return make(registration_v4.BrokerRegistrationResponse, {"error_code": failure})
            self.epoch = self.epochs.pop(0)
            self.fenced = True
            values = {"error_code": ErrorCode.none, "broker_epoch": self.epoch}
            return make(registration_v4.BrokerRegistrationResponse, values)
        self.heartbeats.append(request)
        override = self.heartbeat_override(request)
        if override is not None:
            return make(heartbeat_v1.BrokerHeartbeatResponse, {"error_code": override})
        if request.broker_epoch != self.epoch:
            return make(
                heartbeat_v1.BrokerHeartbeatResponse, {"error_code": ErrorCode.stale_broker_epoch}
            )
        caught_up = request.current_metadata_offset >= self.epoch
        if caught_up and not request.want_fence:
            self.fenced = False
        should_shut_down = False
        if request.want_shut_down:
            self.shutdown_asks += 1
            should_shut_down = (
                self.shutdown_after is not None and self.shutdown_asks > self.shutdown_after
            )
        values = {
            "error_code": ErrorCode.none,
            "is_caught_up": caught_up,
            "is_fenced": self.fenced,
            "should_shut_down": should_shut_down,
        }
        return make(heartbeat_v1.BrokerHeartbeatResponse, values)


class Replay:
    """The broker's published image offset, moved by the test."""

    def __init__(self, offset: int) -> None:
        self.offset = offset

    def __call__(self) -> int:
        return self.offset


def manager(controller: ScriptedController, replay: Replay) -> BrokerLifecycleManager:
    return BrokerLifecycleManager(
        real_runtime(seed=7),
        1,
        "cluster-a",
        uuid.UUID(int=5, version=4),
        (Listener("PLAINTEXT", "127.0.0.1", 9092),),
        "rack-a",
        controller,
        replay,
        heartbeat_interval_ms=20,
    )


async def reach(lifecycle: BrokerLifecycleManager, state: BrokerState) -> None:
    async with asyncio.timeout(WAIT_S):
        await lifecycle.wait_for_state(state)


def test_registration_is_retried_until_accepted_then_the_broker_is_unfenced(
    caplog: pytest.LogCaptureFixture,
) -> None:
    controller = ScriptedController(
        epochs=[10], registration_failures=[TimeoutError("no controller"), ErrorCode.not_controller]
    )
    replay = Replay(offset=3)

    async def run() -> BrokerLifecycleManager:
        lifecycle = manager(controller, replay)
        await lifecycle.start()
        assert lifecycle.state is BrokerState.STARTING
        await controller.until(lambda: len(controller.heartbeats) >= 3)
        # Behind its own registration record: it asks to stay fenced and stays STARTING.
        assert lifecycle.state is BrokerState.STARTING
        assert all(h.want_fence for h in controller.heartbeats)
        replay.offset = 11  # the registration record (offset 10) is replayed
        await reach(lifecycle, BrokerState.RUNNING)
        await lifecycle.close()
        return lifecycle

    with caplog.at_level(logging.INFO, logger="broker.lifecycle"):
        lifecycle = asyncio.run(run())
    assert len(controller.registrations) == 3
    first = controller.registrations[0]
    assert (first.broker_id, first.cluster_id, first.rack) == (1, "cluster-a", "rack-a")
    assert [(item.name, item.port) for item in first.listeners] == [("PLAINTEXT", 9092)]
    assert lifecycle.broker_epoch == 10
    assert {h.current_metadata_offset for h in controller.heartbeats} >= {2, 10}
    assert not controller.heartbeats[-1].want_fence
    assert lifecycle.state is BrokerState.NOT_RUNNING
    messages = [r.getMessage() for r in caplog.records]
    assert (
        "[BrokerLifecycleManager id=1] Successfully registered broker 1 with broker epoch 10"
        in messages
    )
    assert (
        "[BrokerLifecycleManager id=1] The broker has caught up. "
        "Transitioning from STARTING to RECOVERY." in messages
    )
    assert (
        "[BrokerLifecycleManager id=1] The broker has been unfenced. "
        "Transitioning from RECOVERY to RUNNING." in messages
    )


def test_stale_broker_epoch_makes_the_broker_register_again() -> None:
    controller = ScriptedController(epochs=[10, 40])
    replay = Replay(offset=50)

    async def run() -> BrokerLifecycleManager:
        lifecycle = manager(controller, replay)
        await lifecycle.start()
        await reach(lifecycle, BrokerState.RUNNING)
        controller.epoch = 30  # the controller fenced and replaced this registration
        await controller.until(lambda: controller.heartbeats[-1].broker_epoch == 40)
        await lifecycle.close()
        return lifecycle

    lifecycle = asyncio.run(run())
    assert controller.registrations[1].previous_broker_epoch == 10
    assert lifecycle.broker_epoch == 40


def test_an_unknown_broker_registers_again() -> None:
    controller = ScriptedController(epochs=[10, 20])
    replay = Replay(offset=50)
    unknown = {"once": True}

    def forget(_request: Any) -> ErrorCode | None:
        if len(controller.heartbeats) == 2 and unknown.pop("once", False):
            return ErrorCode.broker_id_not_registered
        return None

    controller.heartbeat_override = forget

    async def run() -> None:
        lifecycle = manager(controller, replay)
        await lifecycle.start()
        await controller.until(lambda: len(controller.registrations) >= 2)
        await reach(lifecycle, BrokerState.RUNNING)
        await lifecycle.close()

    asyncio.run(run())
    assert len(controller.registrations) == 2


def test_controlled_shutdown_waits_for_the_controller_to_move_leadership() -> None:
    controller = ScriptedController(epochs=[10])
    controller.shutdown_after = 2
    replay = Replay(offset=11)

    async def run() -> list[BrokerState]:
        lifecycle = manager(controller, replay)
        await lifecycle.start()
        await reach(lifecycle, BrokerState.RUNNING)
        before = len(controller.heartbeats)
        shutdown = asyncio.ensure_future(lifecycle.controlled_shutdown(timeout_s=WAIT_S))
        await reach(lifecycle, BrokerState.PENDING_CONTROLLED_SHUTDOWN)
        await shutdown
        states = [lifecycle.state]
        await lifecycle.close()
        states.append(lifecycle.state)
        asks = [h.want_shut_down for h in controller.heartbeats[before:]]
        assert asks == [True, True, True]  # two refusals, then approval
        return states

    assert asyncio.run(run()) == [BrokerState.SHUTTING_DOWN, BrokerState.NOT_RUNNING]


def test_controlled_shutdown_gives_up_waiting_after_its_timeout() -> None:
    controller = ScriptedController(epochs=[10])
    controller.shutdown_after = None  # never approves
    replay = Replay(offset=11)

    async def run() -> BrokerState:
        lifecycle = manager(controller, replay)
        await lifecycle.start()
        await reach(lifecycle, BrokerState.RUNNING)
        await lifecycle.controlled_shutdown(timeout_s=0.2)
        assert controller.shutdown_asks >= 2
        return lifecycle.state

    assert asyncio.run(run()) is BrokerState.SHUTTING_DOWN


def test_a_broker_that_never_ran_skips_controlled_shutdown() -> None:
    controller = ScriptedController(epochs=[10])
    replay = Replay(offset=0)  # never catches up

    async def run() -> None:
        lifecycle = manager(controller, replay)
        await lifecycle.start()
        waiter = asyncio.ensure_future(lifecycle.wait_for_state(BrokerState.RUNNING))
        await lifecycle.controlled_shutdown(timeout_s=WAIT_S)
        assert lifecycle.state is BrokerState.SHUTTING_DOWN
        assert not any(h.want_shut_down for h in controller.heartbeats)
        with pytest.raises(RuntimeError, match="before RUNNING"):
            await waiter

    asyncio.run(run())
