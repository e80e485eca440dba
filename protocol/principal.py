"""Who sent the request being handled, and from where: per-connection context.

Each connection is served by its own task, so these context variables hold one
connection's values: ``CLIENT_HOST`` is set by the connection loop (protocol/server.py)
from the peer address, ``PRINCIPAL`` by the listener's authentication (TLS client
certificate or SASL login); a connection nobody authenticated is ``User:ANONYMOUS``, as in
Kafka. ``ServedApis.handle`` copies both into each ApiRequest, so handlers and the
authorizer read them from the request, not from ambient state.
"""

from __future__ import annotations

import contextvars

ANONYMOUS = "User:ANONYMOUS"
PRINCIPAL: contextvars.ContextVar[str] = contextvars.ContextVar("principal", default=ANONYMOUS)
# The client's address as Kafka shows it ("/127.0.0.1").
CLIENT_HOST: contextvars.ContextVar[str] = contextvars.ContextVar("client_host", default="/")
# True while a controller handles the request inside an Envelope (broker/envelope.py): its
# PRINCIPAL and CLIENT_HOST are then the forwarded client's, and nothing the forwarding
# broker's connection is trusted with (its client id's quota exemption) applies to it.
FORWARDED: contextvars.ContextVar[bool] = contextvars.ContextVar("forwarded", default=False)
