"""What a kraft-jepsen run may leave on the machine, looked up the way an operator would."""

from __future__ import annotations

import subprocess
from pathlib import Path


def _out(*argv: str) -> str:
    return subprocess.run(list(argv), capture_output=True, text=True, check=True).stdout


def leftovers(tag: str, work_dir: Path | None = None) -> list[str]:
    """Namespaces, links and root FORWARD rules named for run ``tag``, and processes whose
    command line names its work dir; empty when the run cleaned up after itself."""
    found = [
        f"namespace {line.split()[0]}"
        for line in _out("ip", "netns", "list").splitlines()
        if line.startswith(f"kj-{tag}-")
    ]
    for line in _out("ip", "-o", "link", "show").splitlines():
        name = line.split(": ")[1].split("@")[0]
        if name.startswith(f"kj{tag}"):
            found.append(f"link {name}")
    found += [
        f"rule {rule}"
        for rule in _out("iptables", "-S", "FORWARD").splitlines()
        if f"kj-{tag}" in rule
    ]
    if work_dir is not None:
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue  # exited while we looked
            if str(work_dir) in text:
                found.append(f"process {cmdline.parent.name}: {text.strip()}")
    return found


def namespaces() -> set[str]:
    """Every kraft-jepsen namespace on the machine."""
    return {
        line.split()[0]
        for line in _out("ip", "netns", "list").splitlines()
        if line.startswith("kj-")
    }


def processes_running(text: str) -> list[str]:
    """The command lines naming ``text`` (a lane's JVMs name their source file, not the
    run's work dir)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            line = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # exited while we looked
        if text in line:
            found.append(line)
    return found
