"""UpdateFeatures (key 57): finalize feature levels (Kafka's FeatureControlManager).

``kafka-features upgrade|downgrade --feature eligible.leader.replicas.version=N`` lands here,
directly (``--bootstrap-controller``) or forwarded by a broker. A request is applied whole or
not at all: every named feature must be one this controller knows, at a level it supports
and every registered broker supports (a broker that does not list a feature supports only
level 0), and a lower level needs a downgrade type. Turning ELR on also fixes
min.insync.replicas cluster-wide, as Kafka does (KAFKA-16540): brokers that disagreed about
which partitions are under min ISR would break KIP-966's invariants, so the cluster default is
written if absent and per-broker overrides are removed.

``kraft.version`` is the quorum's own feature (KIP-853): its level is in the Raft log's
control records, not in the metadata image, so it is handed to the quorum
(``RaftNode.upgrade_kraft_version``), which appends the KRaftVersionRecord and VotersRecord
itself, as Kafka's FeatureControlManager hands it to ``raftClient.upgradeKRaftVersion``.
Only upgrades: a downgrade is refused whatever the upgrade type. It is checked with the
other features and performed only once they all passed, so the request stays all or nothing.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from metadata.config_defs import CLUSTER_DEFAULT
from metadata.controller.context import ApiError, ControllerContext, ControllerResult
from metadata.controller.elr import MIN_INSYNC_REPLICAS
from metadata.records import (
    BROKER_RESOURCE,
    ELR_FEATURE,
    METADATA_VERSION_FEATURE,
    TRANSACTION_VERSION_FEATURE,
    Config,
    FeatureLevel,
    MetadataRecord,
)
from protocol.api_keys import ApiKey
from protocol.entities import make, response_module
from protocol.turns import SLICE_ENTITIES
from raft.voters import KRAFT_VERSION_FEATURE

# The levels this controller can finalize, per feature.
SUPPORTED_FEATURES = {
    METADATA_VERSION_FEATURE: (1, 1),
    ELR_FEATURE: (0, 1),
    TRANSACTION_VERSION_FEATURE: (0, 2),
}
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3  # FeatureUpdate.upgrade_type (v1+)


def update_features(ctx: ControllerContext, request: Any, api_version: int) -> ControllerResult:
    """Finalize the requested levels, or refuse the whole request with the first error (in
    one pass: the controller runs an UpdateFeaturesRun)."""
    run = UpdateFeaturesRun.start(request, api_version)
    records: list[MetadataRecord] = []
    for updates in run.slices():
        records.extend(run.step(ctx, updates))
    return ControllerResult(tuple(records), run.response())


@dataclass(slots=True)
class UpdateFeaturesRun:
    """One UpdateFeatures: decided as a whole in its first slice (atomic, as Kafka's: every
    record or none), then answered SLICE_ENTITIES features a turn (issue 22: a request may
    name 200,000). Deciding costs at most a few features' work whatever the request's size:
    it stops at the first error, and a request naming more features than are supported
    names an unknown one (or one twice)."""

    request: Any
    module: Any
    validate_only: bool
    decided: bool = False
    code: ErrorCode = ErrorCode.none
    message: str | None = None
    results: list[object] = field(default_factory=list)

    @classmethod
    def start(cls, request: Any, api_version: int) -> UpdateFeaturesRun:
        module = response_module(ApiKey.UPDATE_FEATURES, api_version)
        return cls(request, module, getattr(request, "validate_only", False))

    def slices(self) -> Iterator[Sequence[Any]]:
        updates = self.request.feature_updates
        for begin in range(0, max(len(updates), 1), SLICE_ENTITIES):  # one at least: decide
            yield updates[begin : begin + SLICE_ENTITIES]

    def step(self, ctx: ControllerContext, updates: Sequence[Any]) -> list[MetadataRecord]:
        records = [] if self.decided else self._decide(ctx)
        self.decided = True
        for update in updates:
            self.results.append(
                make(
                    self.module.UpdatableFeatureResult,
                    {
                        "feature": update.feature,
                        "error_code": self.code,
                        "error_message": self.message,
                    },
                )
            )
        return [] if self.validate_only else records

    def _decide(self, ctx: ControllerContext) -> list[MetadataRecord]:
        records: list[MetadataRecord] = []
        updates = self.request.feature_updates
        try:
            if len({u.feature for u in updates}) != len(updates):
                raise ApiError(ErrorCode.invalid_request, "Duplicate feature in the request.")
            kraft_level: int | None = None
            for update in updates:
                if update.feature == KRAFT_VERSION_FEATURE:
                    kraft_level = _check_kraft_version(ctx, update)
                else:
                    records.extend(_update(ctx, update))
            if kraft_level is not None and not self.validate_only:
                _raft_call(ctx, kraft_level, validate_only=False)
        except ApiError as error:
            self.code, self.message, records = error.code, error.message, []
        return records

    def response(self) -> object:
        return make(
            self.module.UpdateFeaturesResponse,
            {
                "throttle_time": timedelta(0),
                "error_code": self.code,
                "error_message": self.message,
                "results": tuple(self.results),
            },
        )


def _upgrade_type(update: Any) -> int:
    upgrade_type = getattr(update, "upgrade_type", None)
    if upgrade_type is None:  # v0: a flag
        return SAFE_DOWNGRADE if update.allow_downgrade else UPGRADE
    return int(upgrade_type)


def _check_kraft_version(ctx: ControllerContext, update: Any) -> int:
    """The kraft.version level asked for, once the quorum says it could take it."""
    level = int(update.max_version_level)
    if ctx.raft is None:
        raise ApiError(
            ErrorCode.invalid_update_version,
            f"Invalid update version {level} for feature {KRAFT_VERSION_FEATURE}. The "
            f"controller does not support the given feature.",
        )
    if _upgrade_type(update) != UPGRADE and level < ctx.raft.kraft_version():
        raise ApiError(
            ErrorCode.invalid_update_version,
            f"Invalid update version {level} for feature {KRAFT_VERSION_FEATURE}. Can't "
            f"downgrade the version of this feature.",
        )
    _raft_call(ctx, level, validate_only=True)
    return level


def _raft_call(ctx: ControllerContext, level: int, *, validate_only: bool) -> None:
    assert ctx.raft is not None
    code, message, _offset = ctx.raft.upgrade_kraft_version(level, validate_only=validate_only)
    if code != ErrorCode.none:
        raise ApiError(ErrorCode(code), message)


def _update(ctx: ControllerContext, update: Any) -> list[MetadataRecord]:
    name, level = update.feature, int(update.max_version_level)
    if name not in SUPPORTED_FEATURES:
        raise ApiError(
            ErrorCode.invalid_update_version,
            f"Invalid update version {level} for feature {name}. The controller does not "
            f"support the given feature.",
        )
    low, high = SUPPORTED_FEATURES[name]
    if not low <= level <= high:
        raise ApiError(
            ErrorCode.invalid_update_version,
            f"Invalid update version {level} for feature {name}. Local controller supports "
            f"versions {low}-{high}.",
        )
    upgrade_type = _upgrade_type(update)
    current = ctx.image.features.get(name, 0)
    if level < current and upgrade_type == UPGRADE:
        raise ApiError(
            ErrorCode.invalid_update_version,
            f"Invalid update version {level} for feature {name}. Can't downgrade the version "
            f"of this feature without setting the upgrade type to either safe or unsafe "
            f"downgrade.",
        )
    for broker_id, broker in sorted(ctx.image.cluster.brokers.items()):
        supported = next((f for f in broker.features if f.name == name), None)
        ok = (
            level == 0
            if supported is None
            else supported.min_version <= level <= supported.max_version
        )
        if not ok:
            raise ApiError(
                ErrorCode.invalid_update_version,
                f"Invalid update version {level} for feature {name}. Broker {broker_id} does "
                f"not support this feature at this level.",
            )
    if level == current:
        return []
    records: list[MetadataRecord] = [FeatureLevel(name, level)]
    if name == ELR_FEATURE and current == 0:
        records.extend(_fix_min_isr(ctx))
    return records


def _fix_min_isr(ctx: ControllerContext) -> list[MetadataRecord]:
    """The cluster default min.insync.replicas (the static one) if unset, and no per-broker
    override, once ELR turns on."""
    records: list[MetadataRecord] = []
    if MIN_INSYNC_REPLICAS not in ctx.image.configs.get((BROKER_RESOURCE, CLUSTER_DEFAULT), {}):
        value = str(ctx.config.min_insync_replicas)
        records.append(Config(BROKER_RESOURCE, CLUSTER_DEFAULT, MIN_INSYNC_REPLICAS, value))
    records.extend(
        Config(BROKER_RESOURCE, name, MIN_INSYNC_REPLICAS, None)
        for (resource_type, name), entries in sorted(ctx.image.configs.items())
        if resource_type == BROKER_RESOURCE
        and name != CLUSTER_DEFAULT
        and MIN_INSYNC_REPLICAS in entries
    )
    return records
