"""``kraft-server format --add-scram``, as Kafka's ``kafka-storage format --add-scram``:
``'SCRAM-SHA-512=[name=alice,password=alice-secret]'`` (optionally ``iterations=N``,
``salt=<base64>``) becomes a UserScramCredential record of the bootstrap metadata, so the
first admin can log in before any broker serves AlterUserScramCredentials. The password is
salted and hashed here; only the derived keys are stored.
"""

from __future__ import annotations

import base64
import binascii
import re

from metadata.records import UserScramCredential
from protocol.security import SCRAM_MECHANISMS

DEFAULT_ITERATIONS = 4096  # Kafka's default (and RFC 7677's minimum for SHA-256)
_ARGUMENT = re.compile(r"\s*([A-Z0-9-]+)\s*=\s*\[(.*)\]\s*")


class ScramArgumentError(ValueError):
    """An --add-scram value that is not MECHANISM=[name=...,password=...]."""


def parse_add_scram(text: str) -> UserScramCredential:
    """One --add-scram argument as a credential record."""
    match = _ARGUMENT.fullmatch(text)
    if match is None:
        raise ScramArgumentError(
            f"--add-scram {text!r}: expected MECHANISM=[name=...,password=...]"
        )
    mechanism = match.group(1)
    if mechanism not in SCRAM_MECHANISMS:
        raise ScramArgumentError(
            f"--add-scram: {mechanism} is not one of {', '.join(SCRAM_MECHANISMS)}"
        )
    fields: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in match.group(2).split(","))):
        key, eq, value = item.partition("=")
        if not eq:
            raise ScramArgumentError(f"--add-scram: {item!r} is not key=value")
        fields[key.strip()] = value.strip().strip('"')
    unknown = fields.keys() - {"name", "password", "iterations", "salt"}
    if unknown:
        raise ScramArgumentError(f"--add-scram: unknown keys {', '.join(sorted(unknown))}")
    if not fields.get("name") or "password" not in fields:
        raise ScramArgumentError("--add-scram: needs name=... and password=...")
    try:
        iterations = int(fields.get("iterations", DEFAULT_ITERATIONS))
        salt = base64.b64decode(fields["salt"], validate=True) if "salt" in fields else None
    except (ValueError, binascii.Error):
        raise ScramArgumentError("--add-scram: iterations must be a number, salt base64") from None
    return scram_credential(mechanism, fields["name"], fields["password"], iterations, salt)


def scram_credential(
    mechanism: str, name: str, password: str, iterations: int, salt: bytes | None = None
) -> UserScramCredential:
    """The stored form of a password (RFC 5802: salt, StoredKey, ServerKey, iterations)."""
    from scramp import ScramException, ScramMechanism

    try:
        salt, stored_key, server_key, count = ScramMechanism(mechanism).make_auth_info(
            password, iteration_count=iterations, salt=salt
        )
    except ScramException as error:
        raise ScramArgumentError(f"--add-scram: {error}") from None
    return UserScramCredential(name, mechanism, salt, stored_key, server_key, count)
