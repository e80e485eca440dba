"""``kraft-sim``: run, sweep and list planted bugs of deterministic simulations.

Exit codes: 0 every run passed, 1 a run found a violation, crashed, or could not decide a
check (unknown, unless ``--allow-unknown``), 2 usage error.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from sim.nemesis import parse_faults
from sim.run import CRASHED, OUTCOMES, RunConfig, RunResult
from sim.scenarios import SCENARIOS

# String hashing must not vary between runs of one seed (ARCHITECTURE, determinism contract).
_HASH_SEED = "0"


def _fix_hash_seed() -> None:
    if os.environ.get("PYTHONHASHSEED") != _HASH_SEED:
        os.environ["PYTHONHASHSEED"] = _HASH_SEED
        os.execv(sys.executable, [sys.executable, "-m", "sim.cli", *sys.argv[1:]])


def _seeds(spec: str) -> list[int]:
    first, sep, last = spec.partition("-")
    try:
        lo, hi = int(first), int(last if sep else first)
    except ValueError:
        raise argparse.ArgumentTypeError(f"seeds must look like A-B, got {spec!r}") from None
    if hi < lo:
        raise argparse.ArgumentTypeError(f"empty seed range {spec!r}")
    return list(range(lo, hi + 1))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kraft-sim", description="Deterministic simulation of kraft-py clusters."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--scenario", required=True, choices=sorted(SCENARIOS))
        p.add_argument("--nodes", type=int, default=6, help="simulated nodes (default 6)")
        p.add_argument(
            "--voters",
            type=int,
            default=None,
            help="raft voters (default: 1 for seeds divisible by 7, else 3, so a sweep "
            "runs sole-voter quorums too)",
        )
        p.add_argument(
            "--observers",
            type=int,
            default=None,
            help="raft observers (default: seed mod 3, so a sweep mixes 0, 1 and 2)",
        )
        p.add_argument(
            "--controllers", type=int, default=3, help="metadata scenario: controllers (default 3)"
        )
        p.add_argument(
            "--brokers", type=int, default=3, help="metadata scenario: brokers (default 3)"
        )
        p.add_argument("--partitions", type=int, default=3, help="kafka: partitions (default 3)")
        p.add_argument("--rf", type=int, default=3, help="kafka: replication factor (default 3)")
        p.add_argument("--acks", choices=("all", "1"), default="all", help="kafka: producer acks")
        p.add_argument(
            "--idempotent", action="store_true", help="kafka: idempotent producers that retry"
        )
        p.add_argument(
            "--compact",
            action="store_true",
            help="kafka: a compacted topic (unique keys) that the brokers' log cleaner rewrites",
        )
        p.add_argument(
            "--descriptor-limit",
            type=int,
            default=None,
            metavar="N",
            help="kafka: each broker's open-files limit (its idle segment files are closed "
            "and reopened under it; log/lazy_files.py)",
        )
        p.add_argument(
            "--compression",
            action="store_true",
            help="kafka: compress each produced batch with a codec drawn per batch (gzip, "
            "snappy, lz4, zstd)",
        )
        p.add_argument(
            "--reassign",
            action="store_true",
            help="kafka: now and then reassign a random partition to random brokers (KIP-455)",
        )
        p.add_argument(
            "--authorizer",
            action="store_true",
            help="kafka: every node authorizes every request (StandardAuthorizer, no ACLs, "
            "allow.everyone.if.no.acl.found=true)",
        )
        p.add_argument(
            "--transactions",
            action="store_true",
            help="kafka: transactional producers and read_committed consumers (kafka_txn.py)",
        )
        p.add_argument(
            "--aiokafka",
            action="store_true",
            help="kafka: an unmodified aiokafka producer and group consumers as lanes, on "
            "virtual time (kafka_aiokafka.py; needs the test extra)",
        )
        p.add_argument(
            "--acls",
            action="store_true",
            help="kafka, with --authorizer: ACLs that deny a topic and a group, and a lane "
            "that keeps asking for what they deny (kafka_acls.py)",
        )
        p.add_argument(
            "--quotas",
            action="store_true",
            help="kafka: a client held to a producer_byte_rate quota, and a lane that "
            "ignores its throttle times (kafka_quotas.py)",
        )
        p.add_argument(
            "--consumer-protocol",
            action="store_true",
            help="kafka: KIP-848 group members (ConsumerGroupHeartbeat) as lanes "
            "(kafka_consumer.py)",
        )
        p.add_argument("--duration", type=float, default=30.0, help="virtual seconds of faults")
        p.add_argument("--faults", default="all", help="all, none, or a comma list")
        p.add_argument("--bug", default=None, help="a planted bug (see `kraft-sim bugs`)")
        p.add_argument(
            "--allow-unknown",
            action="store_true",
            help="pass runs whose checks could not decide (e.g. a linearizability search "
            "out of budget); by default they fail",
        )
        p.add_argument(
            "--trace",
            metavar="DIR",
            default=None,
            help="add each run's Parquet trace to DIR/runs/run_id=<id>/ (docs/traces.md)",
        )

    run = sub.add_parser("run", help="run one seed and print its summary line")
    common(run)
    run.add_argument("--seed", type=int, required=True)
    run.add_argument(
        "--trace-jsonl", metavar="FILE", default=None, help="write the event trace as JSON lines"
    )

    sweep = sub.add_parser("sweep", help="run a range of seeds in parallel processes")
    common(sweep)
    sweep.add_argument("--seeds", type=_seeds, required=True, help="A-B, inclusive")
    sweep.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    sweep.add_argument("--quiet", action="store_true", help="print only failing seeds")
    sweep.add_argument(
        "--keep",
        metavar="DIR",
        default="sim-failures",
        help="where the JSON-lines trace of every failing run, and of its replay when the "
        "digests differ, is kept (default ./sim-failures)",
    )

    sub.add_parser("bugs", help="list the planted bugs of every scenario")
    return parser


def _config(args: argparse.Namespace, seed: int) -> RunConfig:
    scenario = SCENARIOS[args.scenario]
    if args.bug is not None and args.bug not in scenario.bugs:
        raise ValueError(f"unknown bug {args.bug!r} for scenario {args.scenario}")
    if args.nodes < 2:
        raise ValueError("--nodes must be at least 2")
    # Unless asked, the observer and voter counts vary with the seed: a sweep then exercises
    # the observer and sole-voter paths too, and `run --seed N` still replays a sweep's seed
    # N exactly.
    observers = args.observers if args.observers is not None else seed % 3
    voters = args.voters if args.voters is not None else (1 if seed % 7 == 0 else 3)
    if not 1 <= voters <= 9 or not 0 <= observers <= 9:
        raise ValueError("--voters must be 1-9 and --observers 0-9")
    if not 1 <= args.controllers <= 9 or not 1 <= args.brokers <= 9:
        raise ValueError("--controllers and --brokers must be 1-9")
    if not 1 <= args.partitions <= 64 or not 1 <= args.rf <= args.brokers:
        raise ValueError("--partitions must be 1-64 and --rf 1..--brokers")
    if args.trace is not None:
        if os.path.exists(args.trace) and not os.path.isdir(args.trace):
            raise ValueError(f"--trace takes a directory; {args.trace} is a file")
        if importlib.util.find_spec("pyarrow") is None:
            raise ValueError("--trace needs pyarrow: pip install 'kraft-py[spark]'")
    if args.aiokafka:
        if args.scenario != "kafka" or args.acks != "all":
            raise ValueError("--aiokafka needs --scenario kafka and --acks all (idempotent)")
        if importlib.util.find_spec("aiokafka") is None:
            raise ValueError("--aiokafka needs aiokafka: pip install 'kraft-py[test]'")
    if args.consumer_protocol and args.scenario != "kafka":
        raise ValueError("--consumer-protocol needs --scenario kafka")
    if args.acls and (args.scenario != "kafka" or not args.authorizer):
        raise ValueError("--acls needs --scenario kafka and --authorizer")
    if args.quotas and args.scenario != "kafka":
        raise ValueError("--quotas needs --scenario kafka")
    return RunConfig(
        scenario=args.scenario,
        seed=seed,
        duration_s=args.duration,
        faults=parse_faults(args.faults, scenario.faults, scenario.opt_in_faults),
        bug=args.bug,
        nodes=args.nodes,
        voters=voters,
        observers=observers,
        controllers=args.controllers,
        brokers=args.brokers,
        partitions=args.partitions,
        rf=args.rf,
        acks=args.acks,
        idempotent=args.idempotent,
        compact=args.compact,
        compression=args.compression,
        descriptor_limit=args.descriptor_limit,
        reassign=args.reassign,
        authorizer=args.authorizer,
        transactions=args.transactions,
        aiokafka=args.aiokafka,
        consumer_protocol=args.consumer_protocol,
        acls=args.acls,
        quotas=args.quotas,
        trace_dir=args.trace,
    )


def _quiet_logging() -> None:
    """Node code logs recoveries and disk failures; in a simulation the trace records what
    matters, so only errors reach the terminal. ``run`` and every sweep worker set up logging
    the same way, so a seed's run differs between the two in nothing but its process."""
    logging.basicConfig(level=logging.ERROR, force=True)
    # aiokafka (--aiokafka) logs the errors it retries at ERROR; its lanes' operations,
    # errors included, are in the trace.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)


def run_config(config: RunConfig) -> RunResult:
    """Run one configuration (also the unit of work a sweep sends to a worker process). The
    simulator itself raising is a crashed run of that seed, not the end of the sweep."""
    started = time.perf_counter()
    try:
        return SCENARIOS[config.scenario].run(config)
    except Exception as error:
        return RunResult(
            seed=config.seed,
            violation=f"{CRASHED}: the simulator raised {error!r}",
            digest="-",
            virtual_s=0.0,
            wall_s=time.perf_counter() - started,
            detail="".join(traceback.format_exception(error)),
        )


def _passes(result: RunResult, allow_unknown: bool) -> bool:
    return result.ok or (allow_unknown and result.outcome == "unknown")


def _report(result: RunResult) -> str:
    """The summary line, then a crash's traceback."""
    if result.detail is None:
        return result.summary()
    return f"{result.summary()}\n{result.detail.rstrip()}"


def _sweep_worker(config: RunConfig) -> RunResult:
    """A sweep's unit of work: the run, with its JSON-lines trace written beside it so a
    failing run's trace survives whatever happens next (the file of a passing run is
    deleted)."""
    _quiet_logging()
    result = run_config(config)
    if result.ok and config.trace_path is not None:
        Path(config.trace_path).unlink(missing_ok=True)
    return result


@dataclass(frozen=True, slots=True)
class Replay:
    """A failing seed of a sweep run again alone, as ``kraft-sim run --seed N`` would."""

    seed: int
    digest: str
    replays: bool

    def line(self) -> str:
        return f"seed={self.seed} replays={'yes' if self.replays else 'no'} digest={self.digest}"


def run_argv(args: argparse.Namespace, seed: int) -> list[str]:
    """The ``kraft-sim run`` arguments that replay ``seed`` of the sweep ``args`` (every
    option of the sweep that shapes a run, none of those that shape only the sweep)."""
    argv = ["run", "--scenario", args.scenario, "--seed", str(seed)]
    for name in ("nodes", "voters", "observers", "controllers", "brokers", "partitions", "rf"):
        value = getattr(args, name)
        if value is not None:
            argv += [f"--{name}", str(value)]
    argv += ["--acks", args.acks, "--duration", repr(args.duration), "--faults", args.faults]
    if args.bug is not None:
        argv += ["--bug", args.bug]
    for flag in (
        "idempotent",
        "compact",
        "compression",
        "reassign",
        "authorizer",
        "transactions",
        "aiokafka",
        "consumer_protocol",
        "acls",
        "quotas",
        "allow_unknown",
    ):
        if getattr(args, flag):
            argv.append("--" + flag.replace("_", "-"))
    return argv


def replay(args: argparse.Namespace, result: RunResult, keep: Path) -> Replay:
    """Run a failing seed again in a fresh ``kraft-sim run`` process and compare digests.
    When they differ, the replay's trace is kept beside the sweep's: the first line where the
    two files differ is where the hidden input entered."""
    trace = keep / f"seed-{result.seed}.replay.jsonl"
    argv = [sys.executable, "-m", "sim.cli", *run_argv(args, result.seed), "--trace-jsonl"]
    env = {**os.environ, "PYTHONHASHSEED": _HASH_SEED}
    done = subprocess.run([*argv, str(trace)], capture_output=True, text=True, env=env)
    digest = "-"
    for word in done.stdout.split():
        if word.startswith("digest="):
            digest = word.removeprefix("digest=")
    replays = digest == result.digest
    if replays:
        trace.unlink(missing_ok=True)
    return Replay(result.seed, digest, replays)


def _sweep(args: argparse.Namespace) -> int:
    from rich.progress import Progress

    keep = Path(args.keep)
    staging = keep / f".running-{os.getpid()}"
    staging.mkdir(parents=True, exist_ok=True)
    results: list[RunResult] = []
    configs = [
        replace(_config(args, seed), trace_path=str(staging / f"seed-{seed}.jsonl"))
        for seed in args.seeds
    ]
    try:
        with (
            # One fresh interpreter per seed (max_tasks_per_child makes the pool spawn, not
            # fork), as `kraft-sim run` has: a run must not depend on what earlier runs or
            # the sweep itself left in the interpreter, or a failing seed of a sweep might
            # not replay on its own. Every failing seed is replayed below to prove it.
            ProcessPoolExecutor(max_workers=max(1, args.jobs), max_tasks_per_child=1) as pool,
            Progress(transient=True, disable=not sys.stderr.isatty()) as progress,
        ):
            bar = progress.add_task(f"{args.scenario} seeds", total=len(configs))
            for result in pool.map(_sweep_worker, configs):
                progress.advance(bar)
                results.append(result)
                if not args.quiet or not result.ok:
                    progress.console.print(_report(result), highlight=False, soft_wrap=True)
        replays: list[Replay] = []
        for result in results:
            if result.ok:
                continue
            kept = staging / f"seed-{result.seed}.jsonl"
            if kept.exists():
                kept.replace(keep / kept.name)
            replays.append(replay(args, result, keep))
            print(f"{replays[-1].line()} trace={keep / kept.name}")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    line, failed = sweep_summary(results, args.allow_unknown)
    print(line)
    return 1 if failed else 0


def sweep_summary(results: list[RunResult], allow_unknown: bool) -> tuple[str, int]:
    """The sweep's last line (how many runs had each outcome, how many failed, the first
    failing seed) and the number of failing runs."""
    counts = dict.fromkeys(OUTCOMES, 0)
    for result in results:
        counts[result.outcome] += 1
    failed = [r.seed for r in results if not _passes(r, allow_unknown)]
    first = "none" if not failed else str(min(failed))
    tally = " ".join(f"{outcome}={count}" for outcome, count in counts.items())
    return f"seeds={len(results)} {tally} failed={len(failed)} first_failing={first}", len(failed)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``kraft-sim``."""
    if argv is None:
        _fix_hash_seed()
    args = _parser().parse_args(argv)
    _quiet_logging()
    if args.command == "bugs":
        for name, scenario in sorted(SCENARIOS.items()):
            for bug, what in sorted(scenario.bugs.items()):
                print(f"{name:10} {bug:24} {what}")
        return 0
    try:
        base = _config(args, getattr(args, "seed", 0))
    except ValueError as error:
        print(f"kraft-sim: {error}", file=sys.stderr)
        return 2
    if args.command == "run":
        result = run_config(replace(base, trace_path=args.trace_jsonl))
        print(_report(result))
        return 0 if _passes(result, args.allow_unknown) else 1
    return _sweep(args)


if __name__ == "__main__":
    sys.exit(main())
