"""The Kafka protocol layer: framing, headers and entity building on top of kio's schemas.

It sits between ``log`` (which it needs only for ``FileRegion``, so fetch responses can carry
segment regions sent with sendfile) and ``raft``; every layer above speaks the Kafka protocol
through it. See docs/architecture.md.
"""
