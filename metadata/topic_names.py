"""Kafka's rules for topic names (``org.apache.kafka.common.internals.Topic``).

The controller refuses to create such topics; a broker checks names before looking them up,
so a client asking about an impossible name gets INVALID_TOPIC_EXCEPTION with Kafka's own
message instead of "unknown topic". One definition serves both.
"""

from __future__ import annotations

import re

MAX_NAME_LENGTH = 249
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")


def topic_name_error(name: str) -> str | None:
    """Kafka's message for an illegal topic name, None when the name is legal."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return 'Topic name cannot be "." or ".."'
    if len(name) > MAX_NAME_LENGTH:
        return (
            f"Topic name is illegal, it can't be longer than {MAX_NAME_LENGTH} characters, "
            f"topic name: {name}"
        )
    if not _LEGAL.fullmatch(name):
        return (
            f'Topic name "{name}" is illegal, it contains a character other than ASCII '
            "alphanumerics, '.', '_' and '-'"
        )
    return None
