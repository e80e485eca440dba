"""``kraft-server``: format storage, start a node, and inspect logs.

Errors are one line on stderr and a non-zero exit: 1 for a failed operation, 2 for usage.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time

from kraft.config import ConfigError, load_config
from kraft.storage import StorageError, format_dirs, random_uuid
from log.fs import RealFileSystem
from raft.quorum_state import QuorumStateError
from raft.snapshot import SnapshotError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kraft-server", description="A Kafka-compatible, KRaft-style broker and controller."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    fmt = sub.add_parser("format", help="write meta.properties and bootstrap metadata")
    fmt.add_argument("-t", "--cluster-id", required=True)
    fmt.add_argument("-c", "--config", required=True, help="server.properties")
    fmt.add_argument("-g", "--ignore-formatted", action="store_true")
    start = sub.add_parser("start", help="run a broker, a controller, or both")
    start.add_argument("config", help="server.properties")
    sub.add_parser("random-uuid", help="print a new cluster id")
    quorum = sub.add_parser("describe-quorum", help="show the metadata quorum's state")
    quorum.add_argument("--bootstrap-controller", required=True, metavar="HOST:PORT[,HOST:PORT...]")
    quorum.add_argument("--replication", action="store_true", help="per-replica offsets")
    dump = sub.add_parser("dump-log", help="print the batches of log, index and timeindex files")
    dump.add_argument("files", nargs="+")
    dump.add_argument("--print-records", action="store_true")
    dump.add_argument("--index-sanity-check", action="store_true")
    return parser


def _describe_quorum(address: str, replication: bool) -> int:
    from kraft.quorum_tool import describe_quorum, format_replication, format_status

    controllers = []
    for item in address.split(","):
        host, _, port = item.strip().rpartition(":")
        if not host or not port.isdigit():
            print(f"kraft-server describe-quorum: {item!r} is not HOST:PORT", file=sys.stderr)
            return 2
        controllers.append((host, int(port)))
    problems = []
    for host, port in controllers:  # the leader answers; the others say they are not it
        try:
            status = asyncio.run(describe_quorum(host, port))
        except (OSError, TimeoutError) as error:
            problems.append(f"{host}:{port} unreachable ({error})")
            continue
        if status.error_code != 0:
            problems.append(f"{host}:{port} is not the leader (error {status.error_code})")
            continue
        print(format_replication(status) if replication else format_status(status))
        return 0
    print(f"kraft-server describe-quorum: no leader found: {'; '.join(problems)}", file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``kraft-server``."""
    args = _parser().parse_args(argv)
    if args.command == "random-uuid":
        print(random_uuid())
        return 0
    if args.command == "describe-quorum":
        return _describe_quorum(args.bootstrap_controller, args.replication)
    if args.command == "dump-log":
        from log.dump import dump_files

        return dump_files(
            args.files,
            print_records=args.print_records,
            index_sanity_check=args.index_sanity_check,
            out=sys.stdout,
        )
    try:
        config = load_config(args.config)
        if args.command == "format":
            formatted = asyncio.run(
                format_dirs(
                    RealFileSystem(),
                    config,
                    args.cluster_id,
                    ignore_formatted=args.ignore_formatted,
                    timestamp_ms=int(time.time() * 1000),
                )
            )
            for directory in formatted:
                print(
                    f"Formatting {directory} with metadata.version 1 and cluster.id "
                    f"{args.cluster_id}"
                )
            return 0
        from kraft.server import serve

        logging.basicConfig(
            level=logging.INFO,
            format="[%(asctime)s] %(levelname)s %(message)s (%(name)s)",
        )
        return asyncio.run(serve(config))
    except (ConfigError, StorageError, SnapshotError, QuorumStateError) as error:
        print(f"kraft-server {args.command}: {error}", file=sys.stderr)
        return 1
    except OSError as error:
        from kraft.server import OUT_OF_DESCRIPTORS, out_of_descriptors_message

        if error.errno not in OUT_OF_DESCRIPTORS:
            raise
        print(f"kraft-server {args.command}: {out_of_descriptors_message(error)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
