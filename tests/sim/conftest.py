from __future__ import annotations

from collections.abc import Iterator

import pytest

from sim.world import World


@pytest.fixture
def world() -> Iterator[World]:
    w = World(seed=1, keep_events=True)
    yield w
    w.close()
