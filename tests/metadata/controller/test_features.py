"""UpdateFeatures on the controller: eligible.leader.replicas.version on and off, refused
whole when any update is bad, and turning ELR on fixes min.insync.replicas cluster-wide."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from metadata.controller.features import SAFE_DOWNGRADE, UPGRADE, update_features
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
from tests.metadata.controller.support import apply, build, context, request_module, roundtrip

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
