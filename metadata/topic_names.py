"""Kafka's rules for topic names (``org.apache.kafka.common.internals.Topic``).

The controller refuses to create topics with illegal or reserved names; a broker checks
names before looking them up, so a client asking about an impossible name gets
INVALID_TOPIC_EXCEPTION with Kafka's own message instead of "unknown topic". One definition
serves both.
"""

from __future__ import annotations

import re

from log.manager import CLUSTER_METADATA_TOPIC

__all__ = [
    "CLUSTER_METADATA_TOPIC",
    "INTERNAL_TOPICS",
    "MAX_NAME_LENGTH",
    "RESERVED_TOPICS",
    "topic_name_error",
]

MAX_NAME_LENGTH = 249
# Kafka's Topic.isInternal: topics the broker creates and writes itself (its coordinators).
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
# Names no client may create or produce to: the internal topics and the metadata log's.
RESERVED_TOPICS = INTERNAL_TOPICS | {CLUSTER_METADATA_TOPIC}
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
