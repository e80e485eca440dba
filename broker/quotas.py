"""Client quotas on the broker (Kafka's ClientQuotaManager, KIP-13/55/219).

The quotas are ClientQuota records in the metadata image (metadata/controller/
client_quotas.py writes them). For each request the broker resolves the quota of the
request's (user, client-id) in Kafka's order of precedence, records what the request costs
in a sliding-window rate of ``quota.window.num`` samples of ``quota.window.size.seconds``
each, and when the rate is above the quota answers with ``throttle_time_ms`` and then mutes
the connection for that long (KIP-219): the response is sent at once and the connection's
next request is not read until the time has passed (``protocol.server.Channel``), so a
client that ignores the throttle time is held back all the same.

New connections are counted too: an IP over its ``connection_creation_rate`` (KIP-612) has
its connection closed after a delay of at most one window (``admit_connection``).

What is counted, as in Kafka: Produce by the bytes of its request, a consumer's Fetch by the
records bytes of its response (a follower's fetch is replication, never throttled), every
request but a cluster action by the loop thread's time its handler took
(``request_percentage``), and, on the controller, the partitions a CreateTopics,
CreatePartitions or DeleteTopics creates or deletes (``controller_mutation_rate``,
broker/mutation_quota.py: a broker forwards those in an Envelope and mutes its client for
the throttle time the controller's answer carries). Kafka
answers a fetch that violates its quota with an empty response; here the response is sent
whole and the channel muted for the throttle time, which brings the rate back to the quota
just the same one response later (the fetch session has already recorded what was sent, so
withholding it would desynchronize the session).

Only the event loop's clock is read, so the simulator replays quotas exactly.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from broker.authorization import RequestAuthorizer
from broker.bugs import THROTTLE_WITHOUT_MUTE
from broker.mutation_quota import (
    MUTATION_APIS,
    STRICT_SINCE,
    MutationQuota,
    TokenBucket,
    forward_charged,
)
from broker.security import PRINCIPAL
from metadata.authorizer import CLUSTER_NAME
from metadata.controller.client_quotas import (
    CLIENT_ID,
    CONNECTION_CREATION_RATE,
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    IP,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    USER,
)
from metadata.image import MetadataImage, QuotaEntity
from protocol import wire
from protocol.api_keys import ApiKey
from protocol.api_table import AclOperation, Api, ApiHandler, ApiRequest, ResourceType
from protocol.busy import Timed
from protocol.principal import CLIENT_HOST, FORWARDED
from protocol.server import CHANNEL, NO_RESPONSE, Handler
from protocol.turns import Turns

QUOTA_WINDOW_NUM_DEFAULT = 11  # quota.window.num: 10 whole windows and the current one
QUOTA_WINDOW_SIZE_SECONDS_DEFAULT = 1  # quota.window.size.seconds
MAX_SENSORS = 100_000  # (quota type, user, client-id) rates kept; idle ones go first
# The controller listener's requests Kafka's ControllerApis answers without a quota
# (sendResponseExemptThrottle): the quorum's RPCs, which its raft manager handles, and
# AlterPartition. Every other request there is charged to the client's request_percentage.
_CONTROLLER_EXEMPT_APIS = frozenset(
    {
        ApiKey.FETCH,
        ApiKey.FETCH_SNAPSHOT,
        ApiKey.VOTE,
        ApiKey.BEGIN_QUORUM_EPOCH,
        ApiKey.END_QUORUM_EPOCH,
        ApiKey.DESCRIBE_QUORUM,
        ApiKey.ADD_RAFT_VOTER,
        ApiKey.REMOVE_RAFT_VOTER,
        ApiKey.UPDATE_RAFT_VOTER,
        ApiKey.ALTER_PARTITION,
    }
)


def forwarding_client_id(node_id: int) -> str:
    """The client id of a broker's connection that forwards clients' admin requests to
    the controllers (in Envelopes, each inner request charged to its own client there)."""
    return f"broker-{node_id}-forwarding"


_FORWARDING_CLIENT_ID = re.compile(r"broker-\d+-forwarding")


def controller_quota_exempt(
    authorizer: RequestAuthorizer | None,
) -> Callable[[wire.RequestHeader], bool]:
    """Which requests on the controller listener no quota charges: the quorum's RPCs and
    AlterPartition, as Kafka's ControllerApis, and what a broker sends over its forwarding
    connection: the Envelopes themselves (Kafka throttles no forwarded request on the
    broker's connection; the client is charged for the inner request, broker/envelope.py)
    and the internal topics the broker creates on its own for FindCoordinator (not charged,
    as in Kafka; a client's auto-created topics come in Envelopes). That connection is
    known by its client id, trusted only from a principal allowed CLUSTER_ACTION (as
    Kafka's Envelope is) when an authorizer is set, so a client cannot escape its quota by
    naming itself so; and never inside an Envelope, where the client id is the forwarded
    client's own."""

    def exempt(header: wire.RequestHeader) -> bool:
        if header.api_key in _CONTROLLER_EXEMPT_APIS:
            return True
        if FORWARDED.get() or not _FORWARDING_CLIENT_ID.fullmatch(header.client_id or ""):
            return False
        return authorizer is None or authorizer.current().authorize(
            PRINCIPAL.get(),
            CLIENT_HOST.get().removeprefix("/"),
            ResourceType.CLUSTER,
            CLUSTER_NAME,
            AclOperation.CLUSTER_ACTION,
        )

    return exempt


@dataclass(frozen=True, slots=True)
class QuotaConfig:
    """The broker's quota sampling, under Kafka's keys."""

    window_num: int = QUOTA_WINDOW_NUM_DEFAULT
    window_size_s: float = QUOTA_WINDOW_SIZE_SECONDS_DEFAULT

    def __post_init__(self) -> None:
        assert self.window_num >= 1 and self.window_size_s > 0, self

    @property
    def span_s(self) -> float:
        """The whole sampled window: a rate idle this long measures 0."""
        return self.window_num * self.window_size_s


class Rate:
    """Kafka's Rate over a SampledStat: the sum of the samples divided by the time they
    span. A sample covers ``window_size_s``; the oldest of ``window_num`` is reused when a
    new one starts, and samples older than the whole window are reset before a measure. The
    span counts at least ``window_num - 1`` whole windows, so a client's first burst is
    averaged over ten seconds, not over the few milliseconds it took (Kafka's
    Rate.windowSize)."""

    __slots__ = ("_config", "_current", "_starts", "_values", "last_record_s")

    def __init__(self, config: QuotaConfig, now_s: float) -> None:
        self._config = config
        self._starts = [now_s]  # each sample's start
        self._values = [0.0]
        self._current = 0
        self.last_record_s = now_s

    def record(self, value: float, now_s: float) -> None:
        config = self._config
        if now_s - self._starts[self._current] >= config.window_size_s:
            self._current = (self._current + 1) % config.window_num
            if self._current >= len(self._starts):
                self._starts.append(now_s)
                self._values.append(0.0)
            else:
                self._starts[self._current] = now_s
                self._values[self._current] = 0.0
        self._values[self._current] += value
        self.last_record_s = now_s

    def _purge(self, now_s: float) -> None:
        expire_s = self._config.span_s
        for i, start in enumerate(self._starts):
            if now_s - start >= expire_s:
                self._starts[i] = now_s
                self._values[i] = 0.0

    def window_s(self, now_s: float) -> float:
        """The time the samples span (Kafka's Rate.windowSize)."""
        self._purge(now_s)
        config = self._config
        elapsed = now_s - min(self._starts)
        full = int(elapsed // config.window_size_s)
        if full < config.window_num - 1:
            elapsed += (config.window_num - 1 - full) * config.window_size_s
        return elapsed

    def measure(self, now_s: float) -> float:
        """Units per second over the sampled window."""
        window = self.window_s(now_s)
        return sum(self._values) / window

    def throttle_s(self, bound: float, now_s: float) -> float:
        """How long the client must wait for the rate to fall back to ``bound`` if it sent
        nothing more (Kafka's QuotaUtils.throttleTime: the excess over the bound, as a
        fraction of the bound, times the window); 0 within the quota. Unbounded, as Kafka's
        byte-rate throttles are: a client that sent ten windows' worth at once waits for it."""
        window = self.window_s(now_s)
        rate = sum(self._values) / window
        if rate <= bound:
            return 0.0
        return (rate - bound) / bound * window


def user_of(principal: str) -> str:
    """The user quota entity's name of a principal ("User:alice" -> "alice")."""
    return principal.split(":", 1)[1] if ":" in principal else principal


def quota_entities(user: str, client_id: str) -> tuple[QuotaEntity, ...]:
    """The entities whose quota applies to (user, client-id), most specific first: Kafka's
    order (user and client-id, user and default client-id, user, default user and
    client-id, default user and default client-id, default user, client-id, default
    client-id)."""
    return (
        ((CLIENT_ID, client_id), (USER, user)),
        ((CLIENT_ID, None), (USER, user)),
        ((USER, user),),
        ((CLIENT_ID, client_id), (USER, None)),
        ((CLIENT_ID, None), (USER, None)),
        ((USER, None),),
        ((CLIENT_ID, client_id),),
        ((CLIENT_ID, None),),
    )


@dataclass(frozen=True, slots=True)
class ResolvedQuota:
    """A quota bound and the rate it is measured by: the entity that set it, with its
    default names filled in (each user under a default user quota gets a rate of its own;
    all the clients of a user quota share one, as in Kafka's metric tags)."""

    bound: float
    sensor: tuple[str, str]  # (user, client-id); "" where the entity has no such type


def resolve(
    quotas: Mapping[QuotaEntity, Mapping[str, float]], key: str, user: str, client_id: str
) -> ResolvedQuota | None:
    """The quota ``key`` of (user, client-id), or None when no entity sets it."""
    if not quotas:
        return None
    for entity in quota_entities(user, client_id):
        bound = quotas.get(entity, {}).get(key)
        if bound is not None:
            types = {entity_type for entity_type, _ in entity}
            return ResolvedQuota(
                bound,
                (user if USER in types else "", client_id if CLIENT_ID in types else ""),
            )
    return None


class QuotaManager:
    """The broker's client quotas: one Rate per (quota key, user or IP, client-id) in use."""

    def __init__(
        self,
        image: Callable[[], MetadataImage],
        config: QuotaConfig,
        busy_clock: Callable[[], float] | None = None,
        bugs: frozenset[str] = frozenset(),
    ) -> None:
        self._image = image
        self.config = config
        self._mute = THROTTLE_WITHOUT_MUTE not in bugs
        # The loop thread's working time (Runtime.busy_clock), for request_percentage.
        self._busy_clock = busy_clock or _no_time
        self._rates: dict[tuple[str, str, str], Rate] = {}
        self._buckets: dict[tuple[str, str], TokenBucket] = {}  # controller_mutation_rate
        self._swept_s = 0.0

    def record(self, key: str, user: str, client_id: str, value: float, now_s: float) -> float:
        """Record ``value`` against the quota ``key`` of (user, client-id); the throttle time
        (seconds) it earns, 0 when within the quota or when no quota applies."""
        quota = resolve(self._image().client_quotas, key, user, client_id)
        if quota is None:
            return 0.0
        return self._record(key, quota, value, now_s)

    def _record(self, key: str, quota: ResolvedQuota, value: float, now_s: float) -> float:
        self._sweep(now_s)
        sensor = (key, *quota.sensor)
        rate = self._rates.get(sensor)
        if rate is None:
            rate = self._rates[sensor] = Rate(self.config, now_s)
        rate.record(value, now_s)
        return rate.throttle_s(quota.bound, now_s)

    def mutation_quota(
        self, user: str, client_id: str, api_key: int, api_version: int, now_s: float
    ) -> MutationQuota | None:
        """The ``controller_mutation_rate`` of (user, client-id) for one CreateTopics,
        CreatePartitions or DeleteTopics request (broker/mutation_quota.py); None when no
        quota applies."""
        quota = resolve(self._image().client_quotas, CONTROLLER_MUTATION_RATE, user, client_id)
        if quota is None:
            return None
        self._sweep(now_s)
        config = self.config
        # Kafka's TokenBucket burst: (samples - 1) x window x quota.
        burst = (config.window_num - 1) * config.window_size_s * quota.bound
        bucket = self._buckets.get(quota.sensor)
        if bucket is None:
            bucket = self._buckets[quota.sensor] = TokenBucket(burst, now_s)
        strict = api_version >= STRICT_SINCE[api_key]
        return MutationQuota(bucket, quota.bound, burst, strict, now_s)

    def _bounded_fetch(self, request: Any, user: str, client_id: str) -> Any:
        """A consumer's Fetch with its max_bytes (and min_bytes) at most what its
        ``consumer_byte_rate`` allows in the quota window, as Kafka's KafkaApis bounds it, so
        one answer cannot take many windows' worth and a throttled consumer is held in
        steps of at most a window."""
        quota = resolve(self._image().client_quotas, CONSUMER_BYTE_RATE, user, client_id)
        if quota is None:
            return request
        bound = max(1, _fetch_bound(self.config, quota))
        if getattr(request, "max_bytes", 0) <= bound:
            return request
        return dataclasses.replace(
            request, max_bytes=bound, min_bytes=min(request.min_bytes, bound)
        )

    def admit_connection(self, ip: str, now_s: float) -> float:
        """KIP-612's ``connection_creation_rate`` of an IP (its own quota, else the default
        IP's): 0 admits the new connection; otherwise the connection is refused and this is
        how long to hold it before closing it (Kafka's Acceptor delays the close by the
        throttle time, at most one window, so a client retrying at once is slowed). A refused
        connection is not counted, as in Kafka."""
        quotas = self._image().client_quotas
        if not quotas:
            return 0.0
        bound = quotas.get(((IP, ip),), {}).get(CONNECTION_CREATION_RATE)
        if bound is None:
            bound = quotas.get(((IP, None),), {}).get(CONNECTION_CREATION_RATE)
        if bound is None:
            return 0.0
        self._sweep(now_s)
        sensor = (CONNECTION_CREATION_RATE, ip, "")
        rate = self._rates.get(sensor)
        if rate is None:
            rate = self._rates[sensor] = Rate(self.config, now_s)
        rate.record(1.0, now_s)
        throttle_s = rate.throttle_s(bound, now_s)
        if throttle_s <= 0:
            return 0.0
        rate.record(-1.0, now_s)
        return min(throttle_s, self.config.window_size_s)

    def _sweep(self, now_s: float) -> None:
        """Forget rates idle for the whole window (they measure 0 anyway), at most once per
        window, and the idlest beyond MAX_SENSORS, so memory stays bounded whatever client
        ids arrive."""
        if (
            now_s - self._swept_s < self.config.span_s
            and len(self._rates) + len(self._buckets) < MAX_SENSORS
        ):
            return
        self._swept_s = now_s
        expire_s = self.config.span_s
        for sensor, rate in list(self._rates.items()):
            if now_s - rate.last_record_s >= expire_s:
                del self._rates[sensor]
        # A bucket that has refilled is as good as a new one; one still in debt is kept
        # (forgetting it would forgive the debt), however many there are: a client gets
        # into debt only through requests its quota charged.
        for user_client, bucket in list(self._buckets.items()):
            if bucket.full_at_s <= now_s:
                del self._buckets[user_client]
        if len(self._rates) >= MAX_SENSORS:
            idlest = sorted(self._rates, key=lambda s: self._rates[s].last_record_s)
            for sensor in idlest[: len(self._rates) - MAX_SENSORS // 2]:
                del self._rates[sensor]

    @property
    def sensors(self) -> int:
        return len(self._rates) + len(self._buckets)

    def charging_mutations(
        self,
        entries: Iterable[Api],
        exempt: Callable[[wire.RequestHeader], bool],
        default_partitions: int,
    ) -> list[Api]:
        """A controller's ``entries`` with CreateTopics, CreatePartitions and DeleteTopics
        charged to the client's ``controller_mutation_rate`` (broker/mutation_quota.py: a
        topic over the quota refused THROTTLING_QUOTA_EXCEEDED from the strict versions on,
        the throttle time in the response): a client that talks to the controller
        directly, or a broker's client whose request came in an Envelope (handled as that
        client, broker/envelope.py). What ``exempt`` names (a broker's own requests on its
        forwarding connection: the internal topics it creates) is not charged."""
        loop = asyncio.get_running_loop()

        def charged(handler: ApiHandler) -> ApiHandler:
            async def handle(request: ApiRequest) -> object | None:
                quota = None
                if not exempt(request.header):
                    quota = self.mutation_quota(
                        user_of(request.principal),
                        request.client_id,
                        request.header.api_key,
                        request.api_version,
                        loop.time(),
                    )
                if quota is None:
                    return await handler(request)

                async def handled(body: object) -> object:
                    return await handler(dataclasses.replace(request, body=body))

                image = self._image()
                return await forward_charged(request, quota, image, default_partitions, handled)

            return handle

        return [
            dataclasses.replace(api, handler=charged(api.handler))
            if api.key in MUTATION_APIS
            else api
            for api in entries
        ]

    def enforcing(
        self, handle: Handler, exempt: Callable[[wire.RequestHeader], bool] | None = None
    ) -> Handler:
        """``handle`` with the client quotas of each request: Produce's and a consumer
        Fetch's byte rates, every request's ``request_percentage`` (follower fetches and
        WriteTxnMarkers are cluster actions, exempt as in Kafka) and the throttle time a
        handler set itself (the controller mutation quota of a forwarded admin request). The
        response carries the largest throttle time and the connection is muted for it after
        the response is sent. Requests ``exempt`` names pass uncharged and unmuted (the
        controller listener's: controller_quota_exempt)."""
        loop = asyncio.get_running_loop()

        async def throttled(header: wire.RequestHeader, request: object) -> object | None:
            channel = CHANNEL.get()
            if channel is None or (exempt is not None and exempt(header)):
                # Not from a connection (nothing to mute), or never charged.
                return await handle(header, request)
            client_id = header.client_id or ""
            user = user_of(PRINCIPAL.get())
            if header.api_key == ApiKey.FETCH and getattr(request, "replica_id", -1) < 0:
                request = self._bounded_fetch(request, user, client_id)
            time_quota = None
            if not _exempt(header, request):
                quotas = self._image().client_quotas
                time_quota = resolve(quotas, REQUEST_PERCENTAGE, user, client_id)
            if time_quota is None:
                if channel.busy_clock is not None:  # the quota went: stop timing
                    channel.busy_clock = None
                    channel.network_busy_s = 0.0
                response = await handle(header, request)
                busy_s = 0.0
            else:
                # From now on the connection times its decoding and writing as well
                # (Kafka's network thread time), charged with its next request.
                channel.busy_clock = self._busy_clock
                timed = Timed(handle(header, request), self._busy_clock)
                response = await timed
                busy_s = timed.busy_s + channel.take_network_busy_s()
            now_s = loop.time()
            throttle_s = _throttle_time_s(response)  # a handler's own (forwarded requests)
            if time_quota is not None and response is not NO_RESPONSE:
                # Kafka's ClientRequestQuotaManager: the request's thread time as a
                # percentage of one second, its throttle bounded by one quota window.
                request_throttle_s = self._record(
                    REQUEST_PERCENTAGE, time_quota, busy_s * 100.0, now_s
                )
                throttle_s = max(throttle_s, min(request_throttle_s, self.config.window_size_s))
            if header.api_key == ApiKey.PRODUCE:
                byte_key, value = PRODUCER_BYTE_RATE, float(channel.request_bytes)
            elif header.api_key == ApiKey.FETCH and _is_consumer_fetch(request, response):
                byte_key, value = CONSUMER_BYTE_RATE, float(await _records_bytes(response))
            else:
                byte_key = None
            if byte_key is not None:
                throttle_s = max(throttle_s, self.record(byte_key, user, client_id, value, now_s))
            if throttle_s <= 0:
                return response
            if self._mute:
                channel.mute_until(now_s + throttle_s)
            return _with_throttle_time(response, throttle_s)

        return throttled


def _fetch_bound(config: QuotaConfig, quota: ResolvedQuota) -> int:
    """Kafka's ClientQuotaManager.getMaxValueInQuotaWindow: the bytes a consumer's quota
    allows over the sampled window, less the current sample."""
    return int(quota.bound * (config.window_num - 1) * config.window_size_s)


def _no_time() -> float:
    return 0.0


def _exempt(header: wire.RequestHeader, request: object) -> bool:
    """Cluster actions, which Kafka records outside request quotas: a follower's Fetch and
    the transaction coordinator's WriteTxnMarkers."""
    if header.api_key == ApiKey.FETCH:
        return getattr(request, "replica_id", -1) >= 0
    return header.api_key == ApiKey.WRITE_TXN_MARKERS


def _throttle_time_s(response: object) -> float:
    current = getattr(response, "throttle_time", None)
    return current.total_seconds() if isinstance(current, timedelta) else 0.0


def _is_consumer_fetch(request: Any, response: object) -> bool:
    return getattr(request, "replica_id", -1) < 0 and hasattr(response, "responses")


async def _records_bytes(response: Any) -> int:
    """The records a Fetch answer carries, counted a slice of partitions a turn of the loop
    (an answer may hold 200,000 partitions)."""
    total = 0
    turns = Turns()
    for topic in response.responses:
        for partition in topic.partitions:
            total += len(partition.records or b"")
            await turns.tick()
    return total


def _with_throttle_time(response: object, throttle_s: float) -> object:
    """``response`` with its throttle time at least ``throttle_s`` (whole milliseconds, as
    Kafka rounds); a response without one (acks=0's NO_RESPONSE) is left as it is."""
    current = getattr(response, "throttle_time", None)
    if not isinstance(current, timedelta):
        return response
    throttle = timedelta(milliseconds=int(throttle_s * 1000))
    return dataclasses.replace(response, throttle_time=max(current, throttle))  # type: ignore[type-var]
