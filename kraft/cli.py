"""``kraft-server``: format storage, start a node, and inspect logs.

Errors are one line on stderr and a non-zero exit: 1 for a failed operation, 2 for usage.
"""

from __future__ import annotations

import argparse
import base64
import sys
import uuid


def random_uuid() -> str:
    """A cluster or directory id as Kafka prints them: 16 random bytes, URL-safe base64.

    Like Kafka's Uuid.randomUuid it never returns the zero id or an id starting with '-'
    (which would read as a command-line flag).
    """
    while True:
        raw = uuid.uuid4().bytes
        text = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        if raw != bytes(16) and not text.startswith("-"):
            return text


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
    dump = sub.add_parser("dump-log", help="print the batches of log, index and timeindex files")
    dump.add_argument("files", nargs="+")
    dump.add_argument("--print-records", action="store_true")
    dump.add_argument("--index-sanity-check", action="store_true")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``kraft-server``."""
    args = _parser().parse_args(argv)
    if args.command == "random-uuid":
        print(random_uuid())
        return 0
    if args.command == "dump-log":
        from log.dump import dump_files

        return dump_files(
            args.files,
            print_records=args.print_records,
            index_sanity_check=args.index_sanity_check,
            out=sys.stdout,
        )
    print(
        f"kraft-server {args.command}: not yet available (the metadata quorum and the "
        "broker land with issues #5 and #6)",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main())
