"""The fetching side of an incremental fetch session (KIP-227; Kafka's FetchSessionHandler).

A replica fetcher keeps one session with its leader. The first request is full (session id
0, epoch 0) and names every partition; the leader answers with a session id. From then on
each request carries the next epoch and only the partitions added or whose fetch parameters
changed since the last request, and forgets those no longer fetched. Any session error, a
response that does not match what was asked, or a failed request makes the next request
full again (closing the old session on the leader by naming it with epoch 0); a leader that
has no room answers session id 0, and every request stays full.

Sans-I/O: ``build`` turns the partitions wanted now into what to send, ``handle_response``
and ``handle_error`` move the session on.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from broker.fetch_session import (
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    PartitionKey,
    PartitionRequest,
    next_epoch,
)


@dataclass(frozen=True, slots=True)
class FetchRequestData:
    """One request's session fields and partitions."""

    session_id: int
    epoch: int
    to_send: dict[PartitionKey, PartitionRequest]  # added or changed (all, when full)
    to_forget: tuple[PartitionKey, ...]

    @property
    def full(self) -> bool:
        return self.epoch == INITIAL_EPOCH


class FetchSessionHandler:
    """One fetcher's session with one leader."""

    def __init__(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH  # of the next request
        self._session: dict[PartitionKey, PartitionRequest] = {}  # as the leader holds it

    def build(self, wanted: dict[PartitionKey, PartitionRequest]) -> FetchRequestData:
        """The request for ``wanted`` (every partition fetched now): all of it when full,
        else only what the leader's copy of the session lacks or has stale."""
        previous, self._session = self._session, dict(wanted)
        if self.epoch == INITIAL_EPOCH:
            return FetchRequestData(self.session_id, self.epoch, dict(wanted), ())
        to_send = {key: data for key, data in wanted.items() if previous.get(key) != data}
        to_forget = tuple(key for key in previous if key not in wanted)
        return FetchRequestData(self.session_id, self.epoch, to_send, to_forget)

    def handle_response(
        self, error: int, session_id: int, partitions: Iterable[PartitionKey]
    ) -> bool:
        """Move the session on after a response; False when its partitions must be
        ignored (a session error, or an answer for partitions the session lacks)."""
        if error != ErrorCode.none:
            if error == ErrorCode.fetch_session_id_not_found:
                self.session_id = INVALID_SESSION_ID
            self.epoch = INITIAL_EPOCH
            return False
        answered = set(partitions)
        if self.epoch == INITIAL_EPOCH:
            # A full answer names exactly the partitions asked for.
            if answered != set(self._session):
                self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH
                return False
            self.session_id = session_id
            self.epoch = INITIAL_EPOCH if session_id == INVALID_SESSION_ID else next_epoch(0)
            return True
        if not answered <= set(self._session):
            self.epoch = INITIAL_EPOCH
            return False
        if session_id == INVALID_SESSION_ID:  # the leader closed the session
            self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH
        else:
            self.epoch = next_epoch(self.epoch)
        return True

    def handle_error(self) -> None:
        """The request failed (connection lost, timeout): what the leader holds is unknown,
        so the next request is full, closing the old session."""
        self.epoch = INITIAL_EPOCH
