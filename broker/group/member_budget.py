"""The broker-wide bound on what group members keep in the coordinator's memory.

A classic member keeps its JoinGroup protocols (their metadata may be up to a request's
size: 120 JoinGroups of 1 MiB parked in a rebalance took RSS from 73 to 875 MB), a KIP-848
member its subscribed topic names and regex (200 members naming 3,900 topics: +229 MB).
``group.max.size`` and ``group.consumer.max.size`` bound the members of one group; this
bounds their bytes across every group the broker coordinates
(``group.coordinator.member.metadata.max.bytes``, kraft-py's own key: Kafka has no such
bound). A member that would take the total past it is refused with GROUP_MAX_SIZE_REACHED;
a member already counted may always come back with metadata no larger than before.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

# What one subscribed topic name costs besides its characters: its str object and its
# slots in the member's tuple, the group's counter and the records that store it.
SUBSCRIBED_NAME_OVERHEAD_BYTES = 64
PROTOCOL_OVERHEAD_BYTES = 64  # a classic member's protocol: its name and metadata objects


def protocols_bytes(protocols: Iterable[tuple[str, bytes]]) -> int:
    """What a classic member's JoinGroup protocols cost to keep."""
    return sum(PROTOCOL_OVERHEAD_BYTES + len(name) + len(metadata) for name, metadata in protocols)


def subscription_bytes(names: Iterable[str], regex: str | None) -> int:
    """What a KIP-848 member's subscription costs to keep."""
    total = sum(SUBSCRIBED_NAME_OVERHEAD_BYTES + len(name) for name in names)
    return total + (len(regex) + SUBSCRIBED_NAME_OVERHEAD_BYTES if regex is not None else 0)


class MemberMetadataBudget:
    """Bytes of member metadata per group and member, and their total."""

    __slots__ = ("_groups", "max_bytes", "used_bytes")

    def __init__(self, max_bytes: int) -> None:
        assert max_bytes > 0
        self.max_bytes = max_bytes
        self.used_bytes = 0
        self._groups: dict[str, dict[str, int]] = {}

    def fits(self, group_id: str, member_id: str, size: int) -> bool:
        """Whether ``member_id`` of ``group_id`` may keep ``size`` bytes (replacing what it
        keeps now)."""
        held = self._groups.get(group_id, {}).get(member_id, 0)
        return size <= held or self.used_bytes - held + size <= self.max_bytes

    def set(self, group_id: str, member_id: str, size: int) -> None:
        members = self._groups.setdefault(group_id, {})
        self.used_bytes += size - members.get(member_id, 0)
        members[member_id] = size

    def drop(self, group_id: str, member_id: str) -> None:
        members = self._groups.get(group_id)
        if members is None or member_id not in members:
            return
        self.used_bytes -= members.pop(member_id)
        if not members:
            del self._groups[group_id]

    def sync_group(self, group_id: str, sizes: Mapping[str, int]) -> None:
        """The group's members are now exactly ``sizes``."""
        self.drop_group(group_id)
        if sizes:
            self._groups[group_id] = dict(sizes)
            self.used_bytes += sum(sizes.values())

    def drop_group(self, group_id: str) -> None:
        members = self._groups.pop(group_id, None)
        if members is not None:
            self.used_bytes -= sum(members.values())
