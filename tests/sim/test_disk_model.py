"""Hypothesis: any interleaving of writes, truncates, fsyncs and crashes keeps every synced
byte, and what survives a crash is the synced state plus a prefix of the later writes."""

from __future__ import annotations

import asyncio
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.disk import SimDisk

ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.binary(min_size=1, max_size=12)),
        st.tuples(st.just("pwrite"), st.integers(0, 40), st.binary(min_size=1, max_size=12)),
        st.tuples(st.just("truncate"), st.integers(0, 40)),
        st.tuples(st.just("fsync")),
        st.tuples(st.just("crash")),
    ),
    max_size=40,
)


def apply(data: bytearray, op: tuple) -> None:
    if op[0] == "append":
        data.extend(op[1])
    elif op[0] == "pwrite":
        _, position, chunk = op
        if position > len(data):
            data.extend(bytes(position - len(data)))
        data[position : position + len(chunk)] = chunk
    else:
        size = op[1]
        del data[size:]
        data.extend(bytes(size - len(data)))


def possible_after_crash(synced: bytes, pending: list[tuple]) -> list[bytes]:
    """Every state a power cut may leave: synced + a prefix of pending, the next op torn."""
    states = []
    for keep in range(len(pending) + 1):
        base = bytearray(synced)
        for op in pending[:keep]:
            apply(base, op)
        states.append(bytes(base))
        if keep < len(pending) and pending[keep][0] in ("append", "pwrite"):
            op = pending[keep]
            chunk = op[-1]
            for cut in range(1, len(chunk)):
                torn = bytearray(base)
                apply(torn, (*op[:-1], chunk[:cut]))
                states.append(bytes(torn))
    return states


@settings(max_examples=300, deadline=None)
@given(ops, st.integers(0, 2**32))
def test_simulated_disk_matches_the_power_cut_model(script: list[tuple], seed: int) -> None:
    disk = SimDisk(random.Random(seed))
    fs = disk.fs()
    handle = fs.open("/f")
    asyncio.run(fs.fsync_dir("/"))
    synced = b""
    pending: list[tuple] = []
    current = bytearray()
    for op in script:
        if op[0] == "append":
            handle.append(op[1])
        elif op[0] == "pwrite":
            handle.pwrite(op[1], op[2])
        elif op[0] == "truncate":
            handle.truncate(op[1])
        if op[0] in ("append", "pwrite", "truncate"):
            apply(current, op)
            pending.append(op)
        elif op[0] == "fsync":
            asyncio.run(handle.fsync())
            synced, pending = bytes(current), []
        else:
            allowed = possible_after_crash(synced, pending)
            disk.crash()
            fs = disk.fs()
            handle = fs.open("/f")
            survived = handle.pread(0, handle.size())
            assert survived in allowed
            # The synced prefix that no later op touched is intact.
            untouched = len(synced)
            for pending_op in pending:
                start = len(synced) if pending_op[0] == "append" else pending_op[1]
                untouched = min(untouched, start)
            assert survived[:untouched] == synced[:untouched]
            synced, pending, current = survived, [], bytearray(survived)
        assert handle.pread(0, 10_000) == bytes(current)
