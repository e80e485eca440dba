"""Types of kraft_native (native/src/lib.rs), for the type checker."""

from typing import Any

def validate(
    records: bytes | bytearray | memoryview,
    max_message_bytes: int,
    compact: bool,
    timestamp_type: int,
    before_max_ms: int,
    after_max_ms: int,
    target_codec: int,
    now_ms: int,
    max_decompressed_bytes: int,
) -> tuple[Any, ...]:
    """(0, out, log_append_time_ms, payload, max_timestamp) or (kind, message, record_errors):
    see lib.rs."""
