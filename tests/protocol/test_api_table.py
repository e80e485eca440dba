"""protocol/api_table.py: one entry per API key and listener; dispatch, ApiVersions and the
closing of a connection on an API not served all read it."""

from __future__ import annotations

import asyncio
import random
import types
from typing import Any

import pytest

from broker.group.apis import GroupApis
from broker.kafka_apis import KafkaApis
from metadata.image import MetadataImage
from protocol import wire
from protocol.api_keys import ApiKey
from protocol.api_table import (
    API_VERSIONS,
    BROKER,
    CONTROLLER,
    NONE,
    TOPIC_READ,
    Api,
    ApiRequest,
    ApiTable,
    Listeners,
    ServedApis,
)
from protocol.entities import make, request_module
from raft.codec import API_VERSIONS as RAFT_VERSIONS
from tests.broker.fakes import FakeController
from tests.metadata.controller.support import CLUSTER_ID, controller_versions


async def echo(request: ApiRequest) -> object:
    return ("answered", request.header.api_key, request.api_version, request.client_id)


def header(api_key: int, version: int = 0, client_id: str | None = "c") -> wire.RequestHeader:
    return wire.RequestHeader(api_key, version, 7, client_id)


def test_dispatch_reaches_the_entry_of_the_key_and_an_unserved_key_closes() -> None:
    served = ServedApis(
        BROKER,
        [
            Api(ApiKey.FETCH, (4, 13), echo, BROKER, (TOPIC_READ,)),
            Api(ApiKey.METADATA, (0, 12), echo, BROKER, NONE),
        ],
    )
    assert asyncio.run(served.handle(header(ApiKey.FETCH, 12), None)) == ("answered", 1, 12, "c")
    assert asyncio.run(served.handle(header(ApiKey.METADATA, 1, None), None)) == (
        "answered",
        3,
        1,
        "",
    )
    assert asyncio.run(served.handle(header(ApiKey.PRODUCE, 9), None)) is None
    assert served.versions == {ApiKey.FETCH: (4, 13), ApiKey.METADATA: (0, 12)}


def test_a_table_serves_each_listener_its_entries_and_refuses_a_key_twice_on_one() -> None:
    quorum_fetch = Api(ApiKey.FETCH, (12, 17), echo, CONTROLLER, NONE)
    client_fetch = Api(ApiKey.FETCH, (4, 13), echo, BROKER, NONE)
    everywhere = Api(ApiKey.DESCRIBE_CLUSTER, (0, 1), echo, Listeners.BOTH, NONE)
    table = ApiTable([quorum_fetch, client_fetch, everywhere, API_VERSIONS])
    assert table.served(BROKER).versions == {ApiKey.FETCH: (4, 13), ApiKey.DESCRIBE_CLUSTER: (0, 1)}
    assert table.served(CONTROLLER).versions == {
        ApiKey.FETCH: (12, 17),
        ApiKey.API_VERSIONS: (0, 4),
        ApiKey.DESCRIBE_CLUSTER: (0, 1),
    }
    with pytest.raises(AssertionError, match="FETCH registered twice"):
        ApiTable([client_fetch, Api(ApiKey.FETCH, (0, 1), echo, Listeners.BOTH, NONE)])


def test_an_entry_refuses_an_empty_version_range() -> None:
    with pytest.raises(AssertionError, match="PRODUCE"):
        Api(ApiKey.PRODUCE, (9, 3), echo, BROKER, NONE)


def test_api_versions_answers_what_the_listener_serves_sorted_by_key() -> None:
    served = ServedApis(
        CONTROLLER,
        [
            Api(ApiKey.VOTE, (0, 2), echo, CONTROLLER, NONE),
            API_VERSIONS,
            Api(ApiKey.FETCH, (12, 17), echo, CONTROLLER, NONE),
        ],
    )
    module: Any = request_module(ApiKey.API_VERSIONS, 3)
    request = make(module.ApiVersionsRequest, {})
    response: Any = asyncio.run(served.handle(header(ApiKey.API_VERSIONS, 3), request))
    listed = [(k.api_key, k.min_version, k.max_version) for k in response.api_keys]
    assert listed == [(1, 12, 17), (18, 0, 4), (52, 0, 2)]
    refusal: Any = served.api_versions_response(0, wire.UNSUPPORTED_VERSION)
    assert int(refusal.error_code) == wire.UNSUPPORTED_VERSION
    assert [k.api_key for k in refusal.api_keys] == [1, 18, 52]


def broker_entries() -> list[Api]:
    """A broker listener's entries with every optional part present."""
    stub: Any = types.SimpleNamespace()
    apis = KafkaApis(
        1,
        CLUSTER_ID,
        "PLAINTEXT",
        MetadataImage,
        FakeController(MetadataImage()),
        random.Random(0),
        replicas=stub,
        producer_ids=stub,
    )
    groups = GroupApis(stub, MetadataImage, stub)
    return [*apis.apis(), *groups.apis("PLAINTEXT")]


def test_every_served_api_but_api_versions_names_the_authorization_it_needs() -> None:
    entries = [*broker_entries(), API_VERSIONS]
    assert entries
    for api in entries:
        assert bool(api.authorization) == (api.key != ApiKey.API_VERSIONS), api.key.name


def test_the_broker_table_serves_the_apis_it_did_before_the_table() -> None:
    """The versions the four if-chains and seven version tables served (main a7e37cd)."""
    versions = ServedApis(BROKER, broker_entries()).versions
    # 32, and since issue 29 the SCRAM credential APIs, the ACL APIs and the client quota
    # APIs.
    security = {
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
        ApiKey.DESCRIBE_ACLS: (1, 3),
        ApiKey.CREATE_ACLS: (1, 3),
        ApiKey.DELETE_ACLS: (1, 3),
        ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1),
        ApiKey.ALTER_CLIENT_QUOTAS: (0, 1),
    }
    assert {key: versions[key] for key in security} == security
    # Since issue 24, the partition side of transactions (the coordinator's APIs are
    # TxnApis' entries, not in this table).
    transactions = {ApiKey.WRITE_TXN_MARKERS: (1, 2), ApiKey.DESCRIBE_PRODUCERS: (0, 0)}
    assert {key: versions[key] for key in transactions} == transactions
    assert len(versions) == 32 + len(security) + len(transactions)
    assert versions[ApiKey.PRODUCE] == (3, 12)  # v10-12 since KIP-890 part 2 (TV2)
    assert versions[ApiKey.FETCH] == (4, 13)
    assert versions[ApiKey.INIT_PRODUCER_ID] == (0, 4)
    assert versions[ApiKey.CONSUMER_GROUP_HEARTBEAT] == (0, 1)
    assert versions[ApiKey.API_VERSIONS] == (0, 4)
    served_by_controller = controller_versions()
    assert served_by_controller[ApiKey.ALTER_USER_SCRAM_CREDENTIALS] == (0, 0)
    assert served_by_controller[ApiKey.CREATE_ACLS] == served_by_controller[ApiKey.DELETE_ACLS]
    assert served_by_controller[ApiKey.ALTER_CLIENT_QUOTAS] == (0, 1)
    # AlterUserScramCredentials, Create/DeleteAcls, AlterClientQuotas; and since issue 26's
    # failed log dirs (KIP-858), the brokers' AssignReplicasToDirs.
    assert served_by_controller[ApiKey.ASSIGN_REPLICAS_TO_DIRS] == (0, 0)
    assert len(served_by_controller) == 14 + 4 + 1
    assert set(RAFT_VERSIONS) == {
        ApiKey.FETCH,
        ApiKey.API_VERSIONS,
        ApiKey.VOTE,
        ApiKey.BEGIN_QUORUM_EPOCH,
        ApiKey.END_QUORUM_EPOCH,
        ApiKey.DESCRIBE_QUORUM,
        ApiKey.FETCH_SNAPSHOT,
    }
