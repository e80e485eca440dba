"""AlterClientQuotas and DescribeClientQuotas against an image: Kafka's refusals per entry,
validate_only, removal, and the describe filter's match types and ``strict``, checked
against a small statement of the filter rules over every entity shape."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from metadata.controller.client_quotas import alter_client_quotas, describe_client_quotas
from metadata.image import EMPTY, MetadataImage
from metadata.snapshot import image_from_records, image_records
from protocol.api_keys import ApiKey
from protocol.entities import make
from tests.metadata.controller.support import apply, context, request_module, roundtrip

ALTER: Any = request_module(ApiKey.ALTER_CLIENT_QUOTAS, 1)
DESCRIBE: Any = request_module(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1)
Entity = list[tuple[str, str | None]]


def _entry(entity: Entity, *ops: tuple[str, float, bool]) -> Any:
    return make(
        ALTER.EntryData,
        {
            "entity": tuple(
                make(ALTER.EntityData, {"entity_type": t, "entity_name": n}) for t, n in entity
            ),
            "ops": tuple(
                make(ALTER.OpData, {"key": k, "value": v, "remove": r}) for k, v, r in ops
            ),
        },
    )


def _alter(image: MetadataImage, *entries: Any, validate_only: bool = False) -> Any:
    request = make(
        ALTER.AlterClientQuotasRequest, {"entries": entries, "validate_only": validate_only}
    )
    return alter_client_quotas(context(image), request, 1)


def _describe(
    image: MetadataImage, components: list[tuple[str, int, str | None]], strict: bool
) -> Any:
    request = make(
        DESCRIBE.DescribeClientQuotasRequest,
        {
            "components": tuple(
                make(DESCRIBE.ComponentData, {"entity_type": t, "match_type": m, "match": n})
                for t, m, n in components
            ),
            "strict": strict,
        },
    )
    return roundtrip(asyncio.run(describe_client_quotas(image, request, 1)))


def _described(response: Any) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    assert response.error_code == ErrorCode.none
    return {
        tuple((e.entity_type, e.entity_name) for e in entry.entity): {
            v.key: v.value for v in entry.values
        }
        for entry in response.entries
    }


def test_quotas_are_set_on_users_client_ids_both_and_defaults_then_removed() -> None:
    result = _alter(
        EMPTY,
        _entry([("user", "alice")], ("producer_byte_rate", 1024.0, False)),
        _entry([("client-id", None)], ("consumer_byte_rate", 2048.0, False)),
        _entry(
            [("user", None), ("client-id", "app")],
            ("request_percentage", 12.5, False),
            ("controller_mutation_rate", 3.0, False),
        ),
    )
    assert [e.error_code for e in roundtrip(result.response).entries] == [ErrorCode.none] * 3
    image = apply(EMPTY, result)
    assert image.client_quotas == {
        (("user", "alice"),): {"producer_byte_rate": 1024.0},
        (("client-id", None),): {"consumer_byte_rate": 2048.0},
        (("client-id", "app"), ("user", None)): {
            "request_percentage": 12.5,
            "controller_mutation_rate": 3.0,
        },
    }
    # A snapshot of the image rebuilds it.
    assert image_from_records(image_records(image), 1, 1).client_quotas == image.client_quotas
    removed = apply(
        image, _alter(image, _entry([("user", "alice")], ("producer_byte_rate", 0.0, True)))
    )
    assert (("user", "alice"),) not in removed.client_quotas
    assert len(removed.client_quotas) == 2


def test_validate_only_answers_and_writes_nothing() -> None:
    result = _alter(
        EMPTY,
        _entry([("user", "alice")], ("producer_byte_rate", 1024.0, False)),
        _entry([("user", "bob")], ("nonsense", 1.0, False)),
        validate_only=True,
    )
    assert result.records == ()
    codes = [e.error_code for e in result.response.entries]
    assert codes == [ErrorCode.none, ErrorCode.invalid_request]


def test_each_entry_is_refused_whole_with_kafkas_words() -> None:
    refusals = {
        "Invalid empty client quota entity": _entry([], ("producer_byte_rate", 1.0, False)),
        "Unhandled client quota entity type: group": _entry(
            [("group", "g")], ("producer_byte_rate", 1.0, False)
        ),
        "Duplicate user entity": _entry(
            [("user", "a"), ("user", "b")], ("producer_byte_rate", 1.0, False)
        ),
        "Invalid quota entity combination, IP entity should not be combined with User or "
        "ClientId": _entry([("user", "a"), ("ip", "1.2.3.4")], ("producer_byte_rate", 1.0, False)),
        "Invalid configuration key connection_creation_rate": _entry(
            [("user", "a")], ("connection_creation_rate", 1.0, False)
        ),
        "Invalid configuration key producer_byte_rate": _entry(
            [("ip", "1.2.3.4")], ("producer_byte_rate", 1.0, False)
        ),
        "Configuration producer_byte_rate must be a Long value": _entry(
            [("user", "a")], ("consumer_byte_rate", 5.0, False), ("producer_byte_rate", 1.5, False)
        ),
        "Configuration consumer_byte_rate must be positive": _entry(
            [("client-id", "c")], ("consumer_byte_rate", 0.0, False)
        ),
    }
    result = _alter(EMPTY, *refusals.values())
    assert result.records == ()  # the valid op of a refused entry is not written either
    got = [(e.error_code, e.error_message) for e in roundtrip(result.response).entries]
    assert got == [(ErrorCode.invalid_request, message) for message in refusals]


def test_an_ip_quota_is_a_connection_creation_rate() -> None:
    result = _alter(
        EMPTY,
        _entry([("ip", "10.0.0.1")], ("connection_creation_rate", 5.0, False)),
        _entry([("ip", None)], ("connection_creation_rate", 50.0, False)),
    )
    assert apply(EMPTY, result).client_quotas == {
        (("ip", "10.0.0.1"),): {"connection_creation_rate": 5.0},
        (("ip", None),): {"connection_creation_rate": 50.0},
    }


NAMES = (None, "alice", "app")
ENTITIES = [
    tuple(sorted(zip(types, names, strict=True)))
    for types in (("user",), ("client-id",), ("client-id", "user"))
    for names in itertools.product(NAMES, repeat=len(types))
]


def _reference_match(
    entity: tuple[tuple[str, str | None], ...], components: Any, strict: bool
) -> bool:
    """Kafka's describe filter, stated on its own: exact (0) is that name, default (1) is the
    default entity, any (2) is any name but the default; strict wants no other types."""
    names = dict(entity)
    for entity_type, match_type, match in components:
        if entity_type not in names:
            return False
        name = names[entity_type]
        wanted = {0: name == match, 1: name is None, 2: name is not None}[match_type]
        if not wanted:
            return False
    return not strict or set(names) == {c[0] for c in components}


components = st.lists(
    st.tuples(
        st.sampled_from(("user", "client-id")),
        st.sampled_from((0, 1, 2)),
        st.sampled_from(("alice", "app", "bob")),
    ),
    max_size=2,
    unique_by=lambda c: c[0],
).map(lambda cs: [(t, m, n if m == 0 else None) for t, m, n in cs])


@settings(max_examples=200, deadline=None)
@given(st.sets(st.sampled_from(ENTITIES)), components, st.booleans())
def test_describe_lists_what_the_filter_matches(
    entities: set[Any], filters: Any, strict: bool
) -> None:
    image = EMPTY
    for i, entity in enumerate(sorted(entities, key=repr)):
        image = apply(
            image,
            _alter(image, _entry(list(entity), ("producer_byte_rate", float(i + 1), False))),
        )
        assert image.client_quotas[entity] == {"producer_byte_rate": float(i + 1)}
    described = _described(_describe(image, filters, strict))
    expected = {e for e in entities if _reference_match(e, filters, strict)}
    assert set(described) == expected


def test_a_bad_filter_is_refused() -> None:
    for filters, message in (
        ([("user", 0, None)], "Exact match requires a name"),
        ([("user", 1, "x")], "Match name must be null unless the match is exact"),
        ([("user", 3, None)], "Unknown match type 3"),
        ([("user", 2, None), ("user", 1, None)], "Duplicate user filter component"),
    ):
        response = _describe(EMPTY, filters, False)
        assert (response.error_code, response.error_message) == (ErrorCode.invalid_request, message)
        assert response.entries is None
