"""Errors raised while reading record batches, each carrying the Kafka error code a broker
answers with, so the produce path can turn any codec failure into a response without a
translation table of its own.
"""

from __future__ import annotations


class RecordError(Exception):
    """Base of every error the batch codec raises for bad input (never for a bug of ours)."""

    kafka_error_code: int = -1  # UNKNOWN_SERVER_ERROR; subclasses always override it
    # (index in the batch, why) of each refused record, for Produce v8+'s record_errors.
    record_errors: tuple[tuple[int, str], ...] = ()


class CorruptRecordError(RecordError):
    """The bytes cannot be a valid batch: short buffer, bad CRC or magic, lying lengths."""

    kafka_error_code = 2  # CORRUPT_MESSAGE


class InvalidRecordError(RecordError):
    """The batch is well formed but not acceptable, e.g. its record count or offsets disagree."""

    kafka_error_code = 87  # INVALID_RECORD


class UnsupportedCompressionError(RecordError):
    """The batch names a compression codec this broker does not know (ids 5-7)."""

    kafka_error_code = 76  # UNSUPPORTED_COMPRESSION_TYPE


class RecordTooLargeError(RecordError):
    """A batch larger than max.message.bytes."""

    kafka_error_code = 10  # MESSAGE_TOO_LARGE
