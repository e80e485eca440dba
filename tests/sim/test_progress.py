"""A long command's timed phase reports its progress: plain lines off a terminal."""

from __future__ import annotations

import io

from sim.progress import PLAIN_EVERY_S, wait_showing_progress


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0
        self.slept: list[float] = []

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.slept.append(seconds)
        self.t += seconds


def test_off_a_terminal_a_plain_line_every_ten_seconds_with_rate_and_time_left() -> None:
    clock, out = FakeClock(), io.StringIO()
    ops = lambda: int((clock.t - 100.0) * 25)  # noqa: E731 - 25 operations a second
    wait_showing_progress(35, "kraft-jepsen s1", ops, out=out, now=clock.now, sleep=clock.sleep)
    assert clock.t == 135.0  # waited the whole phase, not a moment more
    assert out.getvalue().splitlines() == [
        "kraft-jepsen s1: 10/35 s, 250 ops (25/s), 25 s left",
        "kraft-jepsen s1: 20/35 s, 500 ops (25/s), 15 s left",
        "kraft-jepsen s1: 30/35 s, 750 ops (25/s), 5 s left",
    ]
    assert len(clock.slept) == 4  # three lines and the rest: no busy loop


def test_a_phase_shorter_than_one_line_is_silent() -> None:
    clock, out = FakeClock(), io.StringIO()
    wait_showing_progress(
        PLAIN_EVERY_S - 1, "short", lambda: 0, out=out, now=clock.now, sleep=clock.sleep
    )
    assert out.getvalue() == ""
    assert clock.t == 100.0 + PLAIN_EVERY_S - 1


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_a_bar_runs_for_the_whole_phase() -> None:
    clock, out = FakeClock(), Terminal()
    wait_showing_progress(3, "bar", lambda: 7, out=out, now=clock.now, sleep=clock.sleep)
    assert clock.t == 103.0
    assert max(clock.slept) <= 0.5  # refreshed at least twice a second
