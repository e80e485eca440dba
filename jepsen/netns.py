"""Each node in its own Linux network namespace on one machine: a veth pair per node on one
bridge, one address per node, the harness and its clients in the root namespace.

Every name made here starts with ``PREFIX`` and the run's tag (namespaces
``kj-<tag>-n<id>``, links ``kj<tag>...``, the root FORWARD rule's comment ``kj-<tag>``), so
``cleanup`` finds and removes what any run left behind (a harness killed by SIGKILL, say)
without touching anything else. Cuts are iptables rules inside a node's namespace; a slow
link is a qdisc on its end of the veth pair (netem, or tbf plus an iptables rule where the
kernel has no netem); ``heal`` removes them, and they die with the namespace.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

PREFIX = "kj"
SUBNET = "10.213"  # 10.213.<octet>.0/24 per run; .254 is the bridge (the harness's address)
DEVICE = "eth0"  # a node's end of its veth pair, inside its namespace
# What tc says when the kernel has no sch_netem (and cannot load it).
NO_NETEM = ("Specified qdisc kind is unknown", "Specified qdisc not found")
# Without netem a slow link is a rate limit: the rate that carries this many bytes (a
# fetch response's worth) in the delay drawn, at least MIN_RATE_KBIT.
SLOW_LINK_BYTES = 64 * 1024
MIN_RATE_KBIT = 256
MIN_QUEUE_MS = 100


class BackendError(RuntimeError):
    """A host could not be set up (not root, no ``ip``/``iptables``): one line for the CLI."""


def _run(argv: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise BackendError(f"{' '.join(argv)}: {result.stderr.strip() or result.returncode}")
    return result


def _octet(tag: str) -> int:
    """A /24 for this run that no route of the machine uses yet."""
    used = _run(["ip", "-4", "route", "show"]).stdout
    first = int(tag, 16) % 250 + 1
    for step in range(250):
        octet = (first + step - 1) % 250 + 1
        if f"{SUBNET}.{octet}.0/24" not in used:
            return octet
    raise BackendError(f"no free {SUBNET}.X.0/24 subnet")


@dataclass(slots=True)
class NetnsBackend:
    """Namespaces ``kj-<tag>-n<id>`` on bridge ``kj<tag>br``; ``tag`` is 4 hex digits."""

    tag: str
    nodes: list[int] = field(default_factory=list)
    octet: int = 0
    netem_missing: bool = False  # the kernel has no sch_netem: slow links use tbf+iptables

    @property
    def bridge(self) -> str:
        return f"{PREFIX}{self.tag}br"

    @property
    def comment(self) -> str:
        return f"{PREFIX}-{self.tag}"

    def namespace(self, node: int) -> str:
        return f"{PREFIX}-{self.tag}-n{node}"

    def address(self, node: int) -> str:
        return f"{SUBNET}.{self.octet}.{node}"

    def up(self, nodes: Sequence[int]) -> None:
        if os.geteuid() != 0:
            raise BackendError("network namespaces need root (run kraft-jepsen as root)")
        self.octet = _octet(self.tag)
        bridge = self.bridge
        _run(["ip", "link", "add", bridge, "type", "bridge"])
        _run(["ip", "addr", "add", f"{SUBNET}.{self.octet}.254/24", "dev", bridge])
        _run(["ip", "link", "set", bridge, "up"])
        # With br_netfilter loaded, bridged packets traverse the root FORWARD chain, whose
        # policy may be DROP (Docker sets it): let the bridge's own traffic through.
        _run(
            [
                "iptables",
                "-I",
                "FORWARD",
                "-i",
                bridge,
                "-o",
                bridge,
                "-j",
                "ACCEPT",
                "-m",
                "comment",
                "--comment",
                self.comment,
            ]
        )
        for node in nodes:
            self.nodes.append(node)
            namespace, host_end = self.namespace(node), self._veth(node)
            inner = f"{PREFIX}{self.tag}c{node}"
            _run(["ip", "netns", "add", namespace])
            _run(["ip", "link", "add", host_end, "type", "veth", "peer", "name", inner])
            _run(["ip", "link", "set", host_end, "master", bridge])
            _run(["ip", "link", "set", host_end, "up"])
            _run(["ip", "link", "set", inner, "netns", namespace])
            ns = ["ip", "netns", "exec", namespace]
            _run([*ns, "ip", "link", "set", inner, "name", DEVICE])
            _run([*ns, "ip", "addr", "add", f"{self.address(node)}/24", "dev", DEVICE])
            _run([*ns, "ip", "link", "set", DEVICE, "up"])
            _run([*ns, "ip", "link", "set", "lo", "up"])

    def _veth(self, node: int) -> str:
        return f"{PREFIX}{self.tag}n{node}"

    def wrap(self, node: int, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.namespace(node), *argv]

    def drop_from(self, node: int, peers: Sequence[int]) -> None:
        for peer in peers:
            rule = ["-s", self.address(peer), "-j", "DROP", "-m", "comment", "--comment"]
            _run(self.wrap(node, ["iptables", "-A", "INPUT", *rule, self.comment]))

    def slow(self, node: int, delay_ms: int, jitter_ms: int, loss_pct: int) -> dict[str, object]:
        """tc netem on the node's ``eth0``; on a kernel without ``sch_netem`` (many
        containers' and cloud kernels'), ``_slow_link``'s tbf and iptables instead."""
        if not self.netem_missing:
            spec = ["delay", f"{delay_ms}ms", f"{jitter_ms}ms", "loss", f"{loss_pct}%"]
            tc = ["tc", "qdisc", "replace", "dev", DEVICE, "root", "netem", *spec]
            result = _run(self.wrap(node, tc), check=False)
            if result.returncode == 0:
                return {
                    "method": "netem",
                    "extra_us": delay_ms * 1000,
                    "jitter_us": jitter_ms * 1000,
                    "loss_pct": loss_pct,
                }
            if not any(sign in result.stderr for sign in NO_NETEM):
                raise BackendError(f"{' '.join(tc)}: {result.stderr.strip() or result.returncode}")
            self.netem_missing = True
        return self._slow_link(node, delay_ms, jitter_ms, loss_pct)

    def _slow_link(
        self, node: int, delay_ms: int, jitter_ms: int, loss_pct: int
    ) -> dict[str, object]:
        """Without netem: a token bucket (tbf) whose rate carries ``SLOW_LINK_BYTES`` in
        ``delay_ms``, queueing up to twice the delay and jitter (what overflows is dropped,
        as on a congested link), plus an iptables rule dropping ``loss_pct`` % of what the
        node receives at random (its peers see a lossy link; TCP retransmits)."""
        rate_kbit = max(MIN_RATE_KBIT, SLOW_LINK_BYTES * 8 // max(1, delay_ms))
        latency_ms = max(MIN_QUEUE_MS, 2 * (delay_ms + jitter_ms))
        # At least two full frames, and a 250 Hz kernel tick's worth of the rate.
        burst = max(2 * 1514, rate_kbit * 1000 // 8 // 250)
        tbf = ["tbf", "rate", f"{rate_kbit}kbit", "burst", str(burst), "latency", f"{latency_ms}ms"]
        _run(self.wrap(node, ["tc", "qdisc", "replace", "dev", DEVICE, "root", *tbf]))
        if loss_pct:
            drop = ["-i", DEVICE, "-m", "statistic", "--mode", "random"]
            drop += ["--probability", f"{loss_pct / 100:.4f}", "-j", "DROP"]
            drop += ["-m", "comment", "--comment", self.comment]
            _run(self.wrap(node, ["iptables", "-A", "INPUT", *drop]))
        return {
            "method": "tbf+iptables",
            "rate_kbit": rate_kbit,
            "queue_ms": latency_ms,
            "loss_pct": loss_pct,
        }

    def heal(self) -> None:
        for node in self.nodes:
            _run(self.wrap(node, ["iptables", "-F", "INPUT"]), check=False)
            _run(self.wrap(node, ["tc", "qdisc", "del", "dev", DEVICE, "root"]), check=False)

    def down(self) -> None:
        remove(f"{PREFIX}-{self.tag}-", f"{PREFIX}{self.tag}", self.comment)
        self.nodes = []


def remove(
    namespace_prefix: str, link_prefix: str, comment_prefix: str, spare: Collection[str] = ()
) -> list[str]:
    """Kill the processes in, and delete, every namespace, link and root FORWARD rule whose
    name (comment) starts with the given prefix, but those of the run tags in ``spare``;
    what it removed, one line each."""
    spared = tuple(p for tag in spare for p in (f"{PREFIX}-{tag}", f"{PREFIX}{tag}"))
    removed = []
    listing = _run(["ip", "netns", "list"], check=False).stdout.split("\n")
    for namespace in sorted({line.split()[0] for line in listing if line.strip()}):
        if not namespace.startswith(namespace_prefix) or namespace.startswith(spared):
            continue
        for pid in _run(["ip", "netns", "pids", namespace], check=False).stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
            else:
                removed.append(f"process {pid} in {namespace}")
        # A killed process may hold the namespace a moment; deleting it still unmounts the
        # name, and the kernel frees the namespace with its last process.
        _run(["ip", "netns", "del", namespace], check=False)
        removed.append(f"namespace {namespace}")
    links = _run(["ip", "-o", "link", "show"], check=False).stdout.split("\n")
    for line in links:
        parts = line.split(": ")
        if len(parts) < 2:
            continue
        name = parts[1].split("@")[0]
        mine = name.startswith(link_prefix) and not name.startswith(spared)
        deleted = mine and _run(["ip", "link", "del", name], check=False)
        if deleted and deleted.returncode == 0:
            removed.append(f"link {name}")
    rules = _run(["iptables", "-S", "FORWARD"], check=False).stdout.split("\n")
    for rule in rules:
        words = rule.split()
        if "--comment" not in words or not rule.startswith("-A "):
            continue
        comment = words[words.index("--comment") + 1].strip('"')
        if comment.startswith(comment_prefix) and not comment.startswith(spared):
            _run(["iptables", "-D", *words[1:]], check=False)
            removed.append(f"iptables FORWARD rule {comment}")
    return removed


def cleanup(spare: Collection[str]) -> list[str]:
    """Remove what every kraft-jepsen run on this machine left behind (``kraft-jepsen
    cleanup``): namespaces ``kj-*`` and their processes, links ``kj*``, rules ``kj-*``,
    except those of the live runs tagged in ``spare``."""
    return remove(f"{PREFIX}-", PREFIX, f"{PREFIX}-", spare)
