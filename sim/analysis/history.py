"""From history rows to operations: each invoke paired with the completion that answers it.

A process (Jepsen's sense: one client thread of one node incarnation) has at most one
operation open, so its completion is the next row of the same process. An invoke with no
completion is *pending* (its outcome is unknown, as for ``info``); a completion with no open
invoke, or one that names another function or key, is an *orphan*: the history itself is
malformed, which the checks report as a violation. Both Spark tasks and notebooks call
``pair_operations`` on pandas frames of history rows (one run, or one key of one run).
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

# Statuses of a paired operation. ok: acknowledged; fail: definitely did not happen;
# info/pending: may or may not have happened; orphan: a completion nobody invoked.
INDETERMINATE = ("info", "pending")

OPS_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string()),
        pa.field("index", pa.int64()),
        pa.field("process", pa.string()),
        pa.field("node", pa.string()),
        pa.field("incarnation", pa.int32()),
        pa.field("f", pa.string()),
        pa.field("key", pa.string()),
        pa.field("status", pa.string()),
        pa.field("value_in", pa.int64()),
        pa.field("value_in_text", pa.string()),
        pa.field("values_in", pa.list_(pa.int64())),
        pa.field("value_out", pa.int64()),
        pa.field("value_out_text", pa.string()),
        pa.field("values_out", pa.list_(pa.int64())),
        pa.field("offset", pa.int64()),
        pa.field("error", pa.string()),
        pa.field("invoke_seq", pa.int64()),
        pa.field("complete_seq", pa.int64()),
        pa.field("invoke_us", pa.int64()),
        pa.field("complete_us", pa.int64()),
        pa.field("latency_us", pa.int64()),
        pa.field("detail_out", pa.string()),  # the completion's other fields, as JSON
    ]
)
OPS_COLUMNS = tuple(OPS_SCHEMA.names)


def _column(frame: pd.DataFrame, name: str) -> pd.Series:
    return frame[name] if name in frame else pd.Series([None] * len(frame), index=frame.index)


# The history columns pairing needs; the others (values, errors, node) are used if present.
PAIRING_COLUMNS = ("run_id", "index", "seq", "process", "type", "f", "key", "time_virtual_us")


def pair_operations(history: pd.DataFrame) -> pd.DataFrame:
    """Pair invokes with completions; one row per operation (columns ``OPS_COLUMNS``)."""
    if history.empty:
        return pd.DataFrame({name: pd.Series(dtype=object) for name in OPS_COLUMNS})
    rows = history.sort_values(["run_id", "process", "seq"], kind="stable").reset_index(drop=True)
    is_invoke = (rows["type"] == "invoke").to_numpy()
    same_process = (
        (rows["run_id"] == rows["run_id"].shift(-1))
        & (rows["process"] == rows["process"].shift(-1))
    ).to_numpy()
    next_is_completion = np.append(~is_invoke[1:], False)
    answers = (rows["f"] == rows["f"].shift(-1)).to_numpy() & (
        rows["key"].fillna("\0") == rows["key"].fillna("\0").shift(-1)
    ).to_numpy()
    paired = is_invoke & same_process & next_is_completion & answers
    completion_of_paired = np.append(False, paired[:-1])
    orphan = ~is_invoke & ~completion_of_paired

    invokes = rows[is_invoke]
    matched = paired[is_invoke]

    def mine(name: str) -> np.ndarray:
        return _column(invokes, name).to_numpy(dtype=object)

    def out(name: str) -> np.ndarray:
        # The completion of an invoke is the row after it (when paired).
        values = _column(rows, name).shift(-1)[is_invoke].to_numpy(dtype=object).copy()
        values[~matched] = None
        return values

    status = out("type")
    status[~matched] = "pending"
    ops = pd.DataFrame(
        {
            "run_id": invokes["run_id"].to_numpy(),
            "index": invokes["index"].to_numpy(),
            "process": invokes["process"].to_numpy(),
            "node": mine("node"),
            "incarnation": mine("incarnation"),
            "f": invokes["f"].to_numpy(),
            "key": invokes["key"].to_numpy(),
            "status": status,
            "value_in": mine("value"),
            "value_in_text": mine("value_text"),
            "values_in": mine("values"),
            "value_out": out("value"),
            "value_out_text": out("value_text"),
            "values_out": out("values"),
            "offset": out("offset"),
            "error": out("error"),
            "invoke_seq": invokes["seq"].to_numpy(),
            "complete_seq": out("seq"),
            "invoke_us": invokes["time_virtual_us"].to_numpy(),
            "complete_us": out("time_virtual_us"),
            "detail_out": out("detail"),
        }
    )
    orphans = rows[orphan]
    if not orphans.empty:
        ops = pd.concat([ops, _orphan_ops(orphans)], ignore_index=True)
    complete = pd.to_numeric(ops["complete_us"], errors="coerce")
    ops["latency_us"] = (complete - ops["invoke_us"]).astype("Int64")
    for name in ("complete_us", "complete_seq", "value_in", "value_out", "offset"):
        ops[name] = pd.to_numeric(ops[name], errors="coerce").astype("Int64")
    return ops.sort_values(["run_id", "invoke_seq"], kind="stable").reset_index(drop=True)


def _orphan_ops(orphans: pd.DataFrame) -> pd.DataFrame:
    def cells(name: str) -> np.ndarray:
        return _column(orphans, name).to_numpy(dtype=object)

    return pd.DataFrame(
        {
            "run_id": orphans["run_id"].to_numpy(),
            "index": orphans["index"].to_numpy(),
            "process": orphans["process"].to_numpy(),
            "node": cells("node"),
            "incarnation": cells("incarnation"),
            "f": orphans["f"].to_numpy(),
            "key": orphans["key"].to_numpy(),
            "status": "orphan",
            "value_in": None,
            "value_in_text": None,
            "values_in": None,
            "value_out": cells("value"),
            "value_out_text": cells("value_text"),
            "values_out": cells("values"),
            "offset": cells("offset"),
            "error": cells("error"),
            # An orphan has no invoke; its completion stands in for both ends.
            "invoke_seq": orphans["seq"].to_numpy(),
            "complete_seq": orphans["seq"].to_numpy(),
            "invoke_us": orphans["time_virtual_us"].to_numpy(),
            "complete_us": orphans["time_virtual_us"].to_numpy(),
            "detail_out": cells("detail"),
        }
    )


def op_value(value: int | float | None, text: str | None, values: Any) -> Any:
    """The one value an operation carried: an int, a string, a tuple of ints, or None.

    Takes the cells of ``records`` rows (nulls already None).
    """
    if values is not None:
        return tuple(int(v) for v in values)
    if value is not None:
        return int(value)
    return text


def latest_us(ops: pd.DataFrame) -> int:
    """The latest invoke or completion time among ``ops`` (0 when there are none)."""
    if ops.empty:
        return 0
    times = pd.concat([pd.to_numeric(ops["invoke_us"]), pd.to_numeric(ops["complete_us"])])
    latest = times.max(skipna=True)
    return 0 if pd.isna(latest) else int(latest)


def records(frame: pd.DataFrame, columns: Sequence[str]) -> Iterator[Any]:
    """The rows of ``frame`` as namedtuples of ``columns``, every null (NaN, NA) as None.

    Much cheaper than ``DataFrame.itertuples`` over a wide frame, and a check can test
    ``is None`` whether the frame came from Arrow in a Spark task or from pyarrow here.
    """
    row = namedtuple("row", columns)  # type: ignore[misc]
    arrays = [_cells(frame[name]) if name in frame else [None] * len(frame) for name in columns]
    return map(row._make, zip(*arrays, strict=True))


def _cells(column: pd.Series) -> list[Any]:
    """A column as Python values with None for nulls (avoids pandas' per-cell NA checks)."""
    numpy_dtype = isinstance(column.dtype, np.dtype)  # nullable Int64 also has kind "i"
    if numpy_dtype and column.dtype.kind in "iub":
        return column.tolist()
    if column.dtype.kind == "f":
        data = column.to_numpy()
        cells = data.tolist()
        for i in np.flatnonzero(np.isnan(data)):
            cells[i] = None
        return cells
    if column.dtype != object:  # nullable extension dtypes (Int64, string)
        missing = column.isna().to_numpy()
        cells = column.astype(object).tolist()
        for i in np.flatnonzero(missing):
            cells[i] = None
        return cells
    return [None if _is_null(cell) else cell for cell in column.tolist()]


def _is_null(cell: Any) -> bool:
    return cell is None or cell is pd.NA or (type(cell) is float and cell != cell)
