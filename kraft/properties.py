"""Java .properties files, as Kafka reads server.properties and meta.properties.

Supports what those files use: ``key=value`` / ``key: value`` / ``key value``, ``#`` and ``!``
comments, blank lines, and backslash line continuations. Later keys win, as in Java.
"""

from __future__ import annotations


class PropertiesError(ValueError):
    """A line that is not a property; the message names the file and line."""


def parse_properties(text: str, source: str = "<properties>") -> dict[str, str]:
    """Parse properties text into a dict (keys and values stripped)."""
    props: dict[str, str] = {}
    pending = ""
    for number, raw in enumerate(text.splitlines(), start=1):
        line = pending + raw.strip() if pending else raw.strip()
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        pending = ""
        if not line or line[0] in "#!":
            continue
        separators = [i for i in (line.find("="), line.find(":"), line.find(" ")) if i > 0]
        if not separators:
            raise PropertiesError(f"{source}:{number}: expected key=value, got {raw.strip()!r}")
        cut = min(separators)
        # As Java: the key ends at the first separator; then blanks and at most one '=' or
        # ':' are skipped ("a = 1", "a: 1" and "a 1" all mean a -> 1).
        key, rest = line[:cut].strip(), line[cut:].lstrip()
        if rest[:1] in ("=", ":"):
            rest = rest[1:]
        props[key] = rest.strip()
    return props


def format_properties(props: dict[str, str], header: str | None = None) -> str:
    """Render properties (sorted keys) with an optional comment header."""
    lines = [f"#{header}"] if header else []
    lines += [f"{key}={value}" for key, value in sorted(props.items())]
    return "\n".join(lines) + "\n"
