"""Same seed, same code => byte-identical trace; another seed => another trace."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from sim.nemesis import FAULTS
from sim.run import RunConfig
from sim.scenarios.echo import run_echo


def echo(seed: int, **kwargs: object) -> str:
    result = run_echo(RunConfig("echo", seed, duration_s=30, faults=FAULTS, **kwargs))  # type: ignore[arg-type]
    assert result.ok, result.summary()
    return result.digest


def test_same_seed_same_digest_with_all_faults() -> None:
    assert echo(11) == echo(11)


def test_different_seed_different_digest() -> None:
    assert echo(11) != echo(12)


def test_trace_file_is_byte_identical_across_processes(tmp_path: Path) -> None:
    """Two separate interpreters (different PYTHONHASHSEED) write the same trace bytes."""
    bin_dir = Path(sys.executable).parent
    traces = []
    for i, hash_seed in enumerate(("1", "2")):
        path = tmp_path / f"trace{i}.jsonl"
        result = subprocess.run(
            [
                str(bin_dir / "kraft-sim"),
                "run",
                "--scenario",
                "echo",
                "--seed",
                "5",
                "--duration",
                "20",
                "--trace-jsonl",
                str(path),
            ],
            capture_output=True,
            text=True,
            check=False,
            env={"PYTHONHASHSEED": hash_seed, "PATH": str(bin_dir)},
        )
        assert result.returncode == 0, result.stderr
        traces.append(path.read_bytes())
    assert traces[0] == traces[1]
    fault_kinds = {
        "crash",
        "partition",
        "stall",
        "reset",
        "oneway",
        "slow",
        "pause",
        "refuse",
        "fsync-fail",
        "enospc",
        "clock-skew",
    }
    kinds = {json.loads(line)["kind"] for line in traces[0].splitlines()}
    assert kinds & fault_kinds, "the run should have injected faults"


def test_raft_scenario_same_seed_same_digest() -> None:
    from sim.scenarios.raft import run_raft

    def digest() -> str:
        config = RunConfig("raft", 7, duration_s=15, faults=FAULTS, voters=3, observers=1)
        result = run_raft(config)
        assert result.ok, result.summary()
        return result.digest

    assert digest() == digest()


def test_metadata_scenario_same_seed_same_digest() -> None:
    from sim.scenarios.metadata import FAULTS as OWN_FAULTS
    from sim.scenarios.metadata import run_metadata

    def digest() -> str:
        # Its own faults too: graceful shutdowns and brown-outs on their separate schedule.
        config = RunConfig("metadata", 5, duration_s=10, faults=FAULTS + OWN_FAULTS)
        result = run_metadata(config)
        assert result.ok, result.summary()
        return result.digest

    assert digest() == digest()
