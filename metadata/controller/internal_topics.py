"""The broker's internal topics (``__consumer_offsets``, ``__transaction_state``,
``__share_group_state``): who may create them, and what no request may do to them.

Kafka lets its brokers create these under their own principal and protects them with ACLs.
kraft-py has no authorizer yet, so the controller enforces the rules itself:

- Creation only by a broker, through its internal-topics channel, whose client id names the
  broker and the incarnation id it registered with this run
  (:func:`internal_creator_client_id`). A client's CreateTopics, forwarded or sent to the
  controller listener, under any client id, is refused TOPIC_AUTHORIZATION_FAILED. (No client
  API returns an incarnation id; a process that fetches the metadata log from the controller
  listener can read them, which only the listener's authentication will close. The rules
  below hold on every path, the broker's own included.)
- DeleteTopics and CreatePartitions of an internal topic: TOPIC_AUTHORIZATION_FAILED (every
  committed offset or transaction would be lost, or every group mapped to another
  partition).
- Configs of the compacted ones, at creation and after any AlterConfigs or
  IncrementalAlterConfigs: ``cleanup.policy`` stays exactly ``compact``, ``max.message.bytes``
  stays at least Kafka's default ``message.max.bytes`` (a group's or transaction's record must
  fit), and ``retention.ms`` / ``retention.bytes`` are unset or -1; anything else is
  INVALID_CONFIG, as the resulting state is what is checked.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from kio.schema.errors import ErrorCode

from metadata.config_defs import list_items
from metadata.controller.context import ApiError
from metadata.image import MetadataImage
from metadata.topic_names import INTERNAL_TOPICS

INTERNAL_TOPIC_CREATOR = "kraft-broker-internal-topics"
# The coordinators' topics, compacted so the latest record of every key survives.
COMPACTED_INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
MIN_MAX_MESSAGE_BYTES = 1_048_588  # Kafka's message.max.bytes default
_MAX_BROKER_ID_DIGITS = 10  # an int32


def internal_creator_client_id(broker_id: int, incarnation_id: uuid.UUID) -> str:
    """The client id of broker ``broker_id``'s internal-topics channel for this run: the only
    requests that may create internal topics carry it. Build the broker's ControllerChannel
    for internal topics with it once the broker has registered."""
    return f"{INTERNAL_TOPIC_CREATOR}-{broker_id}-{incarnation_id}"


def is_internal_creator(client_id: str | None, image: MetadataImage) -> bool:
    """Whether ``client_id`` is a registered broker's internal-topics channel: it names the
    broker and the incarnation id that broker registered with."""
    prefix = f"{INTERNAL_TOPIC_CREATOR}-"
    if client_id is None or not client_id.startswith(prefix):
        return False
    broker_id, _, incarnation = client_id[len(prefix) :].partition("-")
    if not (broker_id.isascii() and broker_id.isdigit()) or len(broker_id) > _MAX_BROKER_ID_DIGITS:
        return False
    broker = image.cluster.brokers.get(int(broker_id))
    return broker is not None and str(broker.incarnation_id) == incarnation


def refuse_internal_change(name: str) -> None:
    """DeleteTopics and CreatePartitions: no client may delete or repartition an internal
    topic (TOPIC_AUTHORIZATION_FAILED, Kafka's answer to a principal without the right)."""
    if name in INTERNAL_TOPICS:
        raise ApiError(ErrorCode.topic_authorization_failed, "Authorization failed.")


def check_internal_configs(name: str, configs: Mapping[str, str]) -> None:
    """INVALID_CONFIG unless ``configs`` (the topic-level configs the topic would have) keep
    a compacted internal topic safe; other topics pass."""
    if name not in COMPACTED_INTERNAL_TOPICS:
        return
    policy = configs.get("cleanup.policy")
    if policy is None or list_items(policy) != ["compact"]:
        raise ApiError(
            ErrorCode.invalid_config,
            f"Internal topic {name} must keep cleanup.policy=compact (it was {policy}): "
            "deletion by retention would lose what its coordinator stored",
        )
    max_message = configs.get("max.message.bytes")
    if max_message is not None and int(max_message) < MIN_MAX_MESSAGE_BYTES:
        raise ApiError(
            ErrorCode.invalid_config,
            f"Internal topic {name} needs max.message.bytes of at least "
            f"{MIN_MAX_MESSAGE_BYTES} (it was {max_message}): its coordinator's records "
            "must fit",
        )
    for key in ("retention.ms", "retention.bytes"):
        value = configs.get(key)
        if value is not None and int(value) != -1:
            raise ApiError(
                ErrorCode.invalid_config,
                f"Internal topic {name} cannot have {key}={value}: only -1 (no retention)",
            )
