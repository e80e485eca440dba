"""UpdateFeatures on the controller: eligible.leader.replicas.version on and off, refused
whole when any update is bad, and turning ELR on fixes min.insync.replicas cluster-wide."""

from __future__ import annotations

import dataclasses
import random
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from metadata.controller.features import (
    SAFE_DOWNGRADE,
    UNSAFE_DOWNGRADE,
    UPGRADE,
    update_features,
)
from metadata.image import MetadataImage
from metadata.records import (
    BROKER_RESOURCE,
    ELR_FEATURE,
    TRANSACTION_VERSION_FEATURE,
    Config,
    FeatureLevel,
    FeatureRange,
    Listener,
    RegisterBroker,
)
from raft.core import RaftCore
from raft.voters import KRAFT_VERSION_FEATURE
from tests.metadata.controller.support import apply, build, context, request_module, roundtrip
from tests.raft.harness import CoreCluster

UF1 = request_module(57, 1)
UF0 = request_module(57, 0)


def cluster(elr_level: int, broker_max: int | None = 1) -> MetadataImage:
    """One broker (supporting ELR up to ``broker_max``, None: not listing it)."""
    features = () if broker_max is None else (FeatureRange(ELR_FEATURE, 0, broker_max),)
    listener = (Listener("PLAINTEXT", "h", 9092),)
    register = RegisterBroker(1, uuid.UUID(int=1), 10, listener, features, None)
    records: list[Any] = [FeatureLevel("metadata.version", 1), register]
    if elr_level:
        records.append(FeatureLevel(ELR_FEATURE, elr_level))
    records += [
        Config(BROKER_RESOURCE, "1", "min.insync.replicas", "3"),
        Config(BROKER_RESOURCE, "", "log.retention.ms", "1000"),
    ]
    return build(*records)


def request(*updates: tuple[str, int, int], validate_only: bool = False) -> Any:
    return UF1.UpdateFeaturesRequest(
        feature_updates=tuple(
            UF1.FeatureUpdateKey(feature=f, max_version_level=level, upgrade_type=kind)
            for f, level, kind in updates
        ),
        validate_only=validate_only,
    )


def answer(result: Any) -> tuple[ErrorCode, list[ErrorCode]]:
    response = roundtrip(result.response)
    return response.error_code, [r.error_code for r in response.results]


def test_turning_elr_on_fixes_min_isr_cluster_wide_and_off_needs_a_downgrade() -> None:
    image = cluster(0)
    result = update_features(
        context(image, min_insync_replicas=2), request((ELR_FEATURE, 1, UPGRADE)), 1
    )
    assert answer(result) == (ErrorCode.none, [ErrorCode.none])
    assert result.records == (
        FeatureLevel(ELR_FEATURE, 1),
        Config(BROKER_RESOURCE, "", "min.insync.replicas", "2"),
        Config(BROKER_RESOURCE, "1", "min.insync.replicas", None),
    )
    on = apply(image, result)
    assert on.features[ELR_FEATURE] == 1
    refused = update_features(context(on), request((ELR_FEATURE, 0, UPGRADE)), 1)
    assert answer(refused)[0] == ErrorCode.invalid_update_version and refused.records == ()
    off = update_features(context(on), request((ELR_FEATURE, 0, SAFE_DOWNGRADE)), 1)
    assert off.records == (FeatureLevel(ELR_FEATURE, 0),)
    assert ELR_FEATURE not in apply(on, off).features  # level 0 removes it


@pytest.mark.parametrize(
    ("image", "updates"),
    [
        (cluster(0), [("no.such.feature", 1, UPGRADE)]),
        (cluster(0), [(ELR_FEATURE, 2, UPGRADE)]),
        (cluster(0, broker_max=None), [(ELR_FEATURE, 1, UPGRADE)]),  # the broker lacks it
        (cluster(0), [(ELR_FEATURE, 1, UPGRADE), ("metadata.version", 2, UPGRADE)]),
    ],
)
def test_a_bad_update_refuses_the_whole_request(image: MetadataImage, updates: list) -> None:
    result = update_features(context(image), request(*updates), 1)
    code, per_feature = answer(result)
    assert code == ErrorCode.invalid_update_version
    assert per_feature == [code] * len(updates)
    assert result.records == ()


def test_validate_only_writes_nothing_and_v0_downgrades_by_flag() -> None:
    image = cluster(1)
    checked = update_features(
        context(image), request((ELR_FEATURE, 0, SAFE_DOWNGRADE), validate_only=True), 1
    )
    assert answer(checked)[0] == ErrorCode.none and checked.records == ()
    v0 = UF0.UpdateFeaturesRequest(
        feature_updates=(
            UF0.FeatureUpdateKey(feature=ELR_FEATURE, max_version_level=0, allow_downgrade=True),
        ),
    )
    assert update_features(context(image), v0, 0).records == (FeatureLevel(ELR_FEATURE, 0),)


def test_transaction_version_goes_between_1_and_2_as_the_brokers_support() -> None:
    """KIP-890 part 2's feature: levels 0-2 where every broker lists it (a broker that does
    not list it supports only 0), a lower level only as a downgrade."""
    tv = TRANSACTION_VERSION_FEATURE
    listener = (Listener("PLAINTEXT", "h", 9092),)
    supports = (FeatureRange(tv, 0, 2),)
    image = build(
        FeatureLevel("metadata.version", 1),
        RegisterBroker(1, uuid.UUID(int=1), 10, listener, supports, None),
        FeatureLevel(tv, 2),
    )
    refused = update_features(context(image), request((tv, 1, UPGRADE)), 1)
    assert answer(refused)[0] == ErrorCode.invalid_update_version and refused.records == ()
    assert answer(update_features(context(image), request((tv, 3, UPGRADE)), 1))[0] == (
        ErrorCode.invalid_update_version
    )
    down = update_features(context(image), request((tv, 1, SAFE_DOWNGRADE)), 1)
    assert down.records == (FeatureLevel(tv, 1),)
    tv1 = apply(image, down)
    assert tv1.features[tv] == 1
    up = update_features(context(tv1), request((tv, 2, UPGRADE)), 1)
    assert up.records == (FeatureLevel(tv, 2),)
    # A broker that does not list the feature holds the cluster at level 0.
    old = build(
        FeatureLevel("metadata.version", 1),
        RegisterBroker(2, uuid.UUID(int=2), 10, listener, (), None),
    )
    assert answer(update_features(context(old), request((tv, 2, UPGRADE)), 1))[0] == (
        ErrorCode.invalid_update_version
    )


class _Quorum:
    """The two calls UpdateFeatures makes on the quorum (RaftNode's), on a real leading
    RaftCore of a static three-voter quorum whose followers have fetched."""

    def __init__(self, core: RaftCore) -> None:
        self.core = core

    def kraft_version(self) -> int:
        return self.core.history.kraft_version()

    def upgrade_kraft_version(
        self, version: int, *, validate_only: bool = False
    ) -> tuple[int, str | None, int]:
        return self.core.upgrade_kraft_version(version, validate_only=validate_only)


def leading_core() -> RaftCore:
    rng = random.Random(11)
    cluster = CoreCluster(voters=3, directories=True)
    for _ in range(300):
        cluster.run(1, rng)
        leader = cluster.leader()
        if leader is not None and cluster.cores[leader].high_watermark > 0:
            cluster.run(5, rng)  # every follower has fetched in this epoch
            if cluster.leader() == leader:
                return cluster.cores[leader]
    raise AssertionError("no leader")


def test_kraft_version_is_upgraded_by_the_quorum_only_when_the_whole_request_passes() -> None:
    image = cluster(0)
    quorum = _Quorum(leading_core())
    ctx = dataclasses.replace(context(image), raft=quorum)  # type: ignore[arg-type]
    kraft = (KRAFT_VERSION_FEATURE, 1, UPGRADE)
    # With a bad update beside it nothing happens, and validate_only appends nothing.
    refused = update_features(ctx, request(kraft, (ELR_FEATURE, 7, UPGRADE)), 1)
    assert answer(refused)[0] == ErrorCode.invalid_update_version
    checked = update_features(ctx, request(kraft, validate_only=True), 1)
    assert answer(checked)[0] == ErrorCode.none
    assert quorum.kraft_version() == 0
    # Upgraded: no metadata record (the quorum appended its own control records) ...
    upgraded = update_features(ctx, request(kraft, (ELR_FEATURE, 1, UPGRADE)), 1)
    assert answer(upgraded) == (ErrorCode.none, [ErrorCode.none, ErrorCode.none])
    assert quorum.kraft_version() == 1
    assert FeatureLevel(ELR_FEATURE, 1) in upgraded.records
    assert all(getattr(r, "name", None) != KRAFT_VERSION_FEATURE for r in upgraded.records)
    # ... and never downgraded, whatever the upgrade type.
    for kind in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        down = update_features(ctx, request((KRAFT_VERSION_FEATURE, 0, kind)), 1)
        assert answer(down)[0] == ErrorCode.invalid_update_version, kind
    assert quorum.kraft_version() == 1
    # A controller without a quorum (none handed in) does not know the feature.
    alone = update_features(context(image), request(kraft), 1)
    assert answer(alone)[0] == ErrorCode.invalid_update_version
