"""Bounded staleness after the heal (sim/analysis/catch_up.py), the one definition the
metadata scenario checks online and kraft-analyze re-derives from the trace."""

from __future__ import annotations

import json

import pandas as pd

from sim.analysis.catch_up import CatchUp
from sim.analysis.checks import RunData, check_metadata_catch_up

S = 1_000_000


def test_every_node_must_reach_the_target_within_the_bound() -> None:
    watch = CatchUp(target=50, start_us=10 * S, bound_us=10 * S, nodes=("n4", "n5", "n6"))
    watch.observe("n4", 50, 10 * S)
    watch.observe("n5", 20, 10 * S)
    watch.observe("n5", 60, 19 * S)  # caught up in time
    watch.observe("n6", 5, 10 * S)  # a stalled replay: never gets further
    assert watch.lagging() == ["n6"]
    [message] = watch.violations()
    assert message.startswith("stale-metadata: n6 must replay the metadata log to offset 50")
    assert "had applied offset 5 10s after it" in message
    late = CatchUp(target=50, start_us=0, bound_us=10 * S, nodes=("n4",))
    late.observe("n4", 50, 11 * S)
    assert late.violations() == [
        "stale-metadata: n4 must replay the metadata log to offset 50, committed before the "
        "heal, but reached only 11.0s after it"
    ]
    unseen = CatchUp(target=50, start_us=0, bound_us=10 * S, nodes=("n4",))
    assert "had applied nothing" in unseen.violations()[0]


def events(*rows: tuple[str, str | None, int, int | None, dict | None]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "seq": seq,
                "kind": kind,
                "node": node,
                "time_virtual_us": at,
                "offset_end": offset,
                "detail": json.dumps(detail) if detail is not None else None,
            }
            for seq, (kind, node, at, offset, detail) in enumerate(rows)
        ]
    )


def test_the_trace_check_judges_the_samples_the_simulator_wrote() -> None:
    heal = ("heal-start", None, 10 * S, 50, {"nodes": ["n4", "n5"], "bound_s": 10.0})
    stale = events(heal, ("metadata-applied", "n4", 10 * S, 50, None))
    run = RunData("r", "metadata", pd.DataFrame(), stale)
    [violation] = check_metadata_catch_up(run)
    assert violation.check == "stale-metadata"
    assert violation.message.startswith("stale-metadata: n5 must replay")
    fresh = events(
        heal,
        ("metadata-applied", "n4", 10 * S, 50, None),
        ("metadata-applied", "n5", 10 * S, 30, None),
        ("metadata-applied", "n5", 12 * S, 51, None),
    )
    assert check_metadata_catch_up(RunData("r", "metadata", pd.DataFrame(), fresh)) == []
    # A trace written before the check (a bare heal-start) is not judged by it.
    old = events(("heal-start", None, 10 * S, None, None))
    assert check_metadata_catch_up(RunData("r", "metadata", pd.DataFrame(), old)) == []
