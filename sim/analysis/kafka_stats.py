"""The Kafka workload's figures over time, from one run's paired operations and events.

- Produce availability per time bucket: of the sends that finished in a bucket (``ok``,
  ``fail``, ``info`` at their completion; a send never answered at its invoke, as it never
  finishes), the fraction acknowledged, and the acknowledged sends per second. A bucket in
  which no send finished has no availability (NaN): the producers were all waiting, which
  the rate of zero shows.
- One partition's offsets over time, for the plots around a violation: the offsets sends
  were acknowledged at, the (offset, value) records polls read (each flagged when an
  acknowledged send put another value at that offset), the leaders' high watermarks and
  the replicas' truncations.
- Which partition, offset and time a violation names (its message), so the report can
  zoom on it.

Plain pandas, like the rest of ``sim.analysis``: the report and the notebooks call it alike.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

# Violations about a partition's data (sim/analysis/kafka.py), whose offsets are data offsets;
# the image checks (leader-in-isr, ...) name metadata-log offsets and are not plotted here.
DATA_CHECKS = (
    "inconsistent-offsets",
    "duplicate",
    "nonmonotonic-send",
    "nonmonotonic-poll",
    "poll-skip",
    "lost-write",
    "unseen",
    "high-watermark",
    "committed-truncated",
    "liveness",
    "log-start-moved",
)
DEFAULT_BUCKET_US = 500_000
AVAILABILITY_COLUMNS = ("start_us", "end_us", "sends", "ok", "fail", "info", "pending")


def sends(ops: pd.DataFrame) -> pd.DataFrame:
    """The ``send`` operations of one run (every status), in invoke order."""
    return ops[ops["f"] == "send"].sort_values("invoke_us", kind="stable")


def send_availability(
    ops: pd.DataFrame, bucket_us: int = DEFAULT_BUCKET_US, end_us: int | None = None
) -> pd.DataFrame:
    """Sends per time bucket [start_us, end_us) by outcome, the fraction ``ok``
    (``availability``, NaN when none finished) and ``ok_per_s``; buckets cover 0 to the
    last send's time, or to ``end_us`` when given."""
    if bucket_us <= 0:
        raise ValueError(f"bucket_us must be positive, got {bucket_us}")
    done = sends(ops)
    finished = done["complete_us"].notna().to_numpy()
    at = np.where(
        finished,
        pd.to_numeric(done["complete_us"]).fillna(0).to_numpy(dtype=np.int64),
        done["invoke_us"].to_numpy(dtype=np.int64),
    )
    last = int(at.max()) if len(at) else 0
    count = (max(last, end_us or 0) // bucket_us) + 1
    index = at // bucket_us
    status = np.where(finished, done["status"].to_numpy(dtype=object), "pending")
    table = pd.DataFrame({"start_us": np.arange(count, dtype=np.int64) * bucket_us})
    table["end_us"] = table["start_us"] + bucket_us
    for name in ("ok", "fail", "info", "pending"):
        table[name] = np.bincount(index[status == name], minlength=count)[:count]
    table["sends"] = table[["ok", "fail", "info", "pending"]].sum(axis=1)
    table = table[list(AVAILABILITY_COLUMNS)]
    with np.errstate(invalid="ignore", divide="ignore"):
        table["availability"] = np.where(table["sends"] > 0, table["ok"] / table["sends"], np.nan)
    table["ok_per_s"] = table["ok"] * (1e6 / bucket_us)
    return table


@dataclass(frozen=True, slots=True)
class Focus:
    """What a violation points at: a partition, maybe an offset, and when it was found."""

    check: str
    key: str
    offset: int | None
    time_us: int | None
    message: str


_OFFSET = re.compile(r"\boffsets? (\d+)")
_MOVED_BACK = re.compile(r"back from (\d+) to (\d+)")


def violation_focus(violation: pd.Series | dict, keys: list[str]) -> Focus | None:
    """The partition (one of ``keys``), data offset and time a Kafka data violation names;
    None for other checks or when the message names no known partition."""
    check, message = str(violation["check"]), str(violation["message"])
    if check not in DATA_CHECKS:
        return None
    named = [k for k in keys if re.search(rf"(?<![\w-]){re.escape(k)}(?![\w-])", message)]
    if not named:
        return None
    offset = None
    moved = _MOVED_BACK.search(message)
    found = _OFFSET.search(message)
    if moved is not None:
        offset = min(int(moved.group(1)), int(moved.group(2)))
    elif found is not None:
        offset = int(found.group(1))
    time_us = violation.get("time_virtual_us")
    time_us = None if time_us is None or pd.isna(time_us) else int(time_us)
    return Focus(check, min(named, key=message.index), offset, time_us, message)


def focuses(violations: pd.DataFrame, keys: list[str], limit: int = 3) -> list[Focus]:
    """The first data violation of each distinct check (at most ``limit``), as Focus."""
    chosen: list[Focus] = []
    for _, row in violations.iterrows():
        focus = violation_focus(row, keys)
        if focus is not None and all(f.check != focus.check for f in chosen):
            chosen.append(focus)
        if len(chosen) == limit:
            break
    return chosen


def partition_keys(ops: pd.DataFrame) -> list[str]:
    """The partitions (``<topic>-<partition>``) the run's sends and polls touched."""
    kafka = ops[ops["f"].isin(["send", "poll"])]
    return sorted(str(k) for k in kafka["key"].dropna().unique())


def acknowledged_offsets(ops: pd.DataFrame, key: str) -> pd.DataFrame:
    """Acknowledged sends on ``key``: time_us (completion), offset, value, process."""
    acked = ops[(ops["f"] == "send") & (ops["key"] == key) & (ops["status"] == "ok")]
    acked = acked[acked["offset"].notna()]
    return pd.DataFrame(
        {
            "time_us": acked["complete_us"].astype("int64").to_numpy(),
            "offset": acked["offset"].astype("int64").to_numpy(),
            "value": acked["value_in"].astype("int64").to_numpy(),
            "process": acked["process"].to_numpy(),
        }
    )


def polled_records(ops: pd.DataFrame, key: str) -> pd.DataFrame:
    """Every record successful polls of ``key`` read: time_us (completion), offset, value,
    process, and ``disagrees``: an acknowledged send put another value at that offset (any
    of them: a leader that lost acknowledged records acknowledges their offsets again)."""
    polls = ops[(ops["f"] == "poll") & (ops["key"] == key) & (ops["status"] == "ok")]
    rows = []
    for time_us, process, flat in zip(
        polls["complete_us"], polls["process"], polls["values_out"], strict=True
    ):
        pairs = [] if flat is None else [int(v) for v in flat]
        pairs_read = zip(pairs[::2], pairs[1::2], strict=True)
        rows.extend((int(time_us), offset, value, process) for offset, value in pairs_read)
    read = pd.DataFrame(rows, columns=["time_us", "offset", "value", "process"])
    read = read.astype({"time_us": "int64", "offset": "int64", "value": "int64"})
    acked = acknowledged_offsets(ops, key)[["offset", "value"]].drop_duplicates()
    pairs = read[["offset", "value"]].reset_index().merge(acked, on="offset", suffixes=("", "_ack"))
    wrong = pairs.loc[pairs["value"] != pairs["value_ack"], "index"]
    read["disagrees"] = read.index.isin(wrong)
    return read


def high_watermarks(events: pd.DataFrame, key: str) -> pd.DataFrame:
    """The leaders' high watermarks of ``key`` (sampled ``partition-hw``): time_us, node,
    epoch, hw."""
    rows = events[(events["kind"] == "partition-hw") & (events["log"] == key)]
    hw = [json.loads(d).get("hw") if isinstance(d, str) else None for d in rows["detail"]]
    frame = pd.DataFrame(
        {
            "time_us": rows["time_virtual_us"].to_numpy(dtype=np.int64),
            "node": rows["node"].to_numpy(),
            "epoch": pd.to_numeric(rows["epoch"]).to_numpy(),
            "hw": pd.to_numeric(pd.Series(hw, dtype=object)).to_numpy(),
        }
    )
    return frame.dropna(subset=["hw"]).astype({"hw": "int64"}).reset_index(drop=True)


def truncations(events: pd.DataFrame, key: str) -> pd.DataFrame:
    """The replicas' truncations of ``key``: time_us, node, offset_from, offset_to."""
    rows = events[(events["kind"] == "partition-truncate") & (events["log"] == key)]
    return pd.DataFrame(
        {
            "time_us": rows["time_virtual_us"].to_numpy(dtype=np.int64),
            "node": rows["node"].to_numpy(),
            "offset_from": pd.to_numeric(rows["offset_from"]).to_numpy(),
            "offset_to": pd.to_numeric(rows["offset_to"]).to_numpy(),
        }
    )
