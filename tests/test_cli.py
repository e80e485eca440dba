"""The three console scripts exist, answer --help, and fail cleanly on bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


@pytest.mark.parametrize("script", ["kraft-server", "kraft-sim", "kraft-analyze"])
def test_console_script_help_exits_zero(script: str) -> None:
    result = subprocess.run(
        [str(BIN / script), "--help"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "usage:" in result.stdout


def test_random_uuid_is_kafka_style() -> None:
    from kraft.storage import random_uuid

    ids = {random_uuid() for _ in range(200)}
    assert len(ids) == 200
    for text in ids:
        assert len(text) == 22
        assert not text.startswith("-")
        assert set(text) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def test_kraft_sim_usage_errors_exit_2_with_one_line() -> None:
    result = subprocess.run(
        [str(BIN / "kraft-sim"), "run", "--scenario", "echo", "--seed", "1", "--faults", "nope"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "kraft-sim: unknown fault 'nope'; choose from partition, oneway, isolate, "
        "isolate-leader, bridge, slow, stall, reset, refuse, crash, crash-quorum, pause, "
        "fsync, enospc, skew"
    ]


def test_kraft_sim_lists_planted_bugs() -> None:
    result = subprocess.run(
        [str(BIN / "kraft-sim"), "bugs"], capture_output=True, text=True, check=True
    )
    assert "ack-before-fsync" in result.stdout
    assert "skip-dir-fsync" in result.stdout
