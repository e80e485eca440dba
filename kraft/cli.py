"""``kraft-server``: format storage, start a node, and inspect logs.

Errors are one line on stderr and a non-zero exit: 1 for a failed operation, 2 for usage,
130 for Ctrl-C. The module imports only the standard library at load time, so a Ctrl-C
that lands while the rest is imported is still one line (only one during the interpreter's
own start-up, before any of this runs, is Python's to report).
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from protocol.connect import Connector

logger = logging.getLogger("kraft.cli")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kraft-server", description="A Kafka-compatible, KRaft-style broker and controller."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    fmt = sub.add_parser("format", help="write meta.properties and bootstrap metadata")
    fmt.add_argument("-t", "--cluster-id", required=True)
    fmt.add_argument("-c", "--config", required=True, help="server.properties")
    fmt.add_argument("-g", "--ignore-formatted", action="store_true")
    quorum_start = fmt.add_mutually_exclusive_group()
    quorum_start.add_argument(
        "-s", "--standalone", action="store_true", help="this controller is the only voter"
    )
    quorum_start.add_argument(
        "-I",
        "--initial-controllers",
        metavar="ID@HOST:PORT:DIRID,...",
        help="the first voters, each with its metadata directory id",
    )
    quorum_start.add_argument(
        "-N",
        "--no-initial-controllers",
        action="store_true",
        help="join a running dynamic quorum (added later with add-controller)",
    )
    fmt.add_argument(
        "-S",
        "--add-scram",
        action="append",
        default=[],
        metavar="MECHANISM=[name=...,password=...]",
        help="a SCRAM credential for the bootstrap metadata (repeatable)",
    )
    start = sub.add_parser("start", help="run a broker, a controller, or both")
    start.add_argument("config", help="server.properties")
    sub.add_parser("random-uuid", help="print a new cluster id")
    quorum = sub.add_parser("describe-quorum", help="show the metadata quorum's state")
    quorum.add_argument("--bootstrap-controller", required=True, metavar="HOST:PORT[,HOST:PORT...]")
    quorum.add_argument("--replication", action="store_true", help="per-replica offsets")
    quorum.add_argument(
        "--command-config",
        metavar="FILE",
        help="client properties for a secured controller listener (security.protocol, ssl.*, "
        "sasl.*), as Kafka's tools take them",
    )
    add = sub.add_parser(
        "add-controller", help="add this node (its config) to a dynamic quorum (KIP-853)"
    )
    add.add_argument("--bootstrap-controller", required=True, metavar="HOST:PORT[,HOST:PORT...]")
    add.add_argument("-c", "--command-config", "--config", dest="config", required=True)
    remove = sub.add_parser("remove-controller", help="remove a voter from a dynamic quorum")
    remove.add_argument("--bootstrap-controller", required=True, metavar="HOST:PORT[,HOST:PORT...]")
    remove.add_argument("--controller-id", type=int, required=True)
    remove.add_argument("--controller-directory-id", required=True)
    remove.add_argument(
        "--command-config",
        metavar="FILE",
        help="client properties for a secured controller listener (security.protocol, ssl.*, "
        "sasl.*), as Kafka's tools take them",
    )
    state = sub.add_parser(
        "quorum-state", help="show a stopped node's election state, or reset its epoch"
    )
    state.add_argument("-c", "--config", required=True, help="server.properties")
    state.add_argument(
        "--reset-epoch",
        type=int,
        metavar="N",
        help="rewrite quorum-state to epoch N, no leader, no vote (docs/raft.md, Epoch cliff)",
    )
    dump = sub.add_parser("dump-log", help="print the batches of log, index and timeindex files")
    dump.add_argument("files", nargs="+")
    dump.add_argument("--print-records", action="store_true")
    dump.add_argument("--index-sanity-check", action="store_true")
    shell = sub.add_parser(
        "metadata-shell",
        help="browse the metadata image of a log directory, a snapshot or a running quorum",
    )
    shell_source = shell.add_mutually_exclusive_group(required=True)
    shell_source.add_argument(
        "--snapshot",
        "--directory",
        dest="source",
        metavar="PATH",
        help="a __cluster_metadata-0 directory or one .checkpoint snapshot file",
    )
    shell_source.add_argument(
        "--bootstrap-controller",
        metavar="HOST:PORT[,HOST:PORT...]",
        help="read the committed metadata log from a running quorum's controller listener",
    )
    shell.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="with --bootstrap-controller: give up after this long (default 30)",
    )
    shell.add_argument(
        "--fetch-max-bytes",
        type=int,
        default=1024 * 1024,
        metavar="BYTES",
        help="with --bootstrap-controller: at most this much per Fetch answer (default 1 MiB)",
    )
    shell.add_argument(
        "--command-config",
        metavar="FILE",
        help="with --bootstrap-controller: client properties for a secured controller "
        "listener (security.protocol, ssl.*, sasl.*), as Kafka's tools take them",
    )
    shell.add_argument(
        "shell_command", nargs=argparse.REMAINDER, metavar="COMMAND", help="one command, e.g. ls /"
    )
    return parser


def _connector(command: str, path: str | None) -> Connector | None:
    """The connector an operator tool reaches a controller listener with: from the Kafka
    client properties of ``--command-config``, or plain TCP without one. None after
    printing the one-line reason the file cannot be used."""
    from kraft.properties import PropertiesError, parse_properties
    from kraft.security import SecurityConfigError, client_security
    from protocol.connect import Connector

    if path is None:
        return Connector()
    try:
        with open(path, encoding="utf-8") as file:
            props = parse_properties(file.read(), path)
        return Connector(client_security(props, path))
    except (OSError, UnicodeDecodeError, PropertiesError, SecurityConfigError) as error:
        print(f"kraft-server {command}: --command-config {error}", file=sys.stderr)
        return None


def _describe_quorum(address: str, replication: bool, command_config: str | None) -> int:
    import asyncio

    from kraft.quorum_tool import describe_quorum, format_replication, format_status
    from protocol import wire

    connector = _connector("describe-quorum", command_config)
    if connector is None:
        return 2

    controllers = []
    for item in address.split(","):
        host, _, port_text = item.strip().rpartition(":")
        if not host or not port_text.isdigit():
            print(f"kraft-server describe-quorum: {item!r} is not HOST:PORT", file=sys.stderr)
            return 2
        controllers.append((host, int(port_text)))
    problems = []
    for host, port in controllers:  # the leader answers; the others say they are not it
        try:
            status = asyncio.run(describe_quorum(host, port, connector=connector))
        except (OSError, TimeoutError) as error:
            problems.append(f"{host}:{port} unreachable ({error})")
            continue
        except (EOFError, wire.FrameError, ValueError):
            # A broker listener closes the connection on DescribeQuorum, as Kafka's does.
            problems.append(f"{host}:{port} gave no DescribeQuorum answer (not a controller?)")
            continue
        if status.error_code != 0:
            problems.append(f"{host}:{port} is not the leader (error {status.error_code})")
            continue
        print(format_replication(status) if replication else format_status(status))
        return 0
    print(f"kraft-server describe-quorum: no leader found: {'; '.join(problems)}", file=sys.stderr)
    return 1


def _change_controller(args: argparse.Namespace) -> int:
    """add-controller / remove-controller, as Kafka's kafka-metadata-quorum: the change is
    sent to each bootstrap controller in turn until the leader takes it."""
    import asyncio

    from kraft.config import ConfigError, load_config
    from kraft.quorum_tool import change_voter
    from kraft.storage import metadata_directory_id, parse_uuid
    from log.fs import RealFileSystem
    from protocol.connect import Connector

    name = args.command
    try:
        if name == "add-controller":
            config = load_config(args.config)
            # The new controller logs in to the quorum as it will as a voter: its own
            # controller-listener client settings (Kafka's add-controller takes the
            # controller's properties as the admin client's --command-config too).
            connector: Connector | None = Connector(config.security().controller_client)
            directory = metadata_directory_id(RealFileSystem(), config.metadata_dir)
            if directory is None:
                raise ConfigError(f"{config.metadata_dir} is not formatted")
            endpoint = config.controller_endpoint()
            change = "add"
            voter_id = config.node_id
            endpoints: tuple[tuple[str, str, int], ...] = (
                (endpoint.name, endpoint.host or "localhost", endpoint.port),
            )
        else:
            change, voter_id, endpoints = "remove", args.controller_id, ()
            directory = parse_uuid(args.controller_directory_id)
            connector = _connector(name, args.command_config)
            if connector is None:
                return 2
    except (ConfigError, ValueError) as error:
        print(f"kraft-server {name}: {error}", file=sys.stderr)
        return 1
    problems = []
    for item in args.bootstrap_controller.split(","):
        host, _, port_text = item.strip().rpartition(":")
        if not host or not port_text.isdigit():
            print(f"kraft-server {name}: {item!r} is not HOST:PORT", file=sys.stderr)
            return 2
        try:
            code = asyncio.run(
                change_voter(
                    host,
                    int(port_text),
                    change,
                    voter_id,
                    directory,
                    endpoints,
                    connector=connector,
                )
            )
        except (OSError, TimeoutError) as error:
            problems.append(f"{item} unreachable ({error})")
            continue
        if code == 0:
            print(f"{'Added' if change == 'add' else 'Removed'} controller {voter_id}")
            return 0
        problems.append(f"{item}: error {code}")
    print(f"kraft-server {name}: {'; '.join(problems)}", file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``kraft-server``."""
    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except KeyboardInterrupt:  # Ctrl-C before the signal handlers were installed
        print(f"kraft-server {args.command}: interrupted", file=sys.stderr)
        return 130


def _run(args: argparse.Namespace) -> int:
    import asyncio
    import time

    from kraft.config import ConfigError, load_config, unknown_key_warnings
    from kraft.storage import (
        StorageError,
        format_dirs,
        parse_initial_controllers,
        random_uuid,
    )
    from log.fs import RealFileSystem
    from raft.quorum_state import QuorumStateError
    from raft.snapshot import SnapshotError

    if args.command == "random-uuid":
        print(random_uuid())
        return 0
    if args.command == "describe-quorum":
        return _describe_quorum(args.bootstrap_controller, args.replication, args.command_config)
    if args.command in ("add-controller", "remove-controller"):
        return _change_controller(args)
    if args.command == "metadata-shell":
        from kraft.metadata_live import parse_addresses
        from kraft.metadata_shell import main as shell_main

        source: str | list[tuple[str, int]] = args.source
        connector = _connector("metadata-shell", args.command_config)
        if connector is None:
            return 2
        if args.bootstrap_controller is not None:
            try:
                source = parse_addresses(args.bootstrap_controller)
            except ValueError as error:
                print(f"kraft-server metadata-shell: {error}", file=sys.stderr)
                return 2
            if args.timeout <= 0 or args.fetch_max_bytes <= 0:
                print(
                    "kraft-server metadata-shell: --timeout and --fetch-max-bytes must be positive",
                    file=sys.stderr,
                )
                return 2
        return shell_main(
            source,
            args.shell_command,
            sys.stdin,
            sys.stdout,
            sys.stderr,
            timeout_s=args.timeout,
            max_bytes=args.fetch_max_bytes,
            connector=connector,
        )
    if args.command == "dump-log":
        from log.dump import dump_files

        return dump_files(
            args.files,
            print_records=args.print_records,
            index_sanity_check=args.index_sanity_check,
            out=sys.stdout,
        )
    logging.basicConfig(
        level=logging.INFO,
        format="[%(asctime)s] %(levelname)s %(message)s (%(name)s)",
    )
    try:
        config = load_config(args.config)
        for warning in unknown_key_warnings(config):
            logger.warning(warning)
        if args.command == "quorum-state":
            from kraft.quorum_reset import quorum_status

            before, after = asyncio.run(quorum_status(config, reset_epoch=args.reset_epoch))
            if after is None:
                print(before.describe())
            else:
                print(f"Reset {before.describe()}")
                print(f"   to {after.describe()}")
            return 0
        if args.command == "format":
            from kraft.scram_args import ScramArgumentError, parse_add_scram

            try:
                credentials = tuple(parse_add_scram(text) for text in args.add_scram)
            except ScramArgumentError as error:
                print(f"kraft-server format: {error}", file=sys.stderr)
                return 2
            formatted = asyncio.run(
                format_dirs(
                    RealFileSystem(),
                    config,
                    args.cluster_id,
                    ignore_formatted=args.ignore_formatted,
                    timestamp_ms=int(time.time() * 1000),
                    standalone=args.standalone,
                    initial_controllers=parse_initial_controllers(args.initial_controllers)
                    if args.initial_controllers is not None
                    else None,
                    no_initial_controllers=args.no_initial_controllers,
                    bootstrap_records=credentials,
                )
            )
            for directory in formatted:
                print(
                    f"Formatting {directory} with metadata.version 1 and cluster.id "
                    f"{args.cluster_id}"
                )
            return 0
        from kraft.server import serve

        return asyncio.run(serve(config))
    except (ConfigError, StorageError, SnapshotError, QuorumStateError) as error:
        print(f"kraft-server {args.command}: {error}", file=sys.stderr)
        return 1
    except OSError as error:  # an unusable log dir, a listener port taken, no descriptors...
        print(f"kraft-server {args.command}: {_os_error_text(error)}", file=sys.stderr)
        return 1


def _os_error_text(error: OSError) -> str:
    from kraft.server import OUT_OF_DESCRIPTORS, out_of_descriptors_message

    if error.errno in OUT_OF_DESCRIPTORS:
        return out_of_descriptors_message(error)
    if error.filename is not None:
        return f"{error.filename}: {error.strerror}"
    return str(error)


if __name__ == "__main__":
    sys.exit(main())
