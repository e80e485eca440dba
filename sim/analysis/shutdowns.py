"""A graceful shutdown ends within a bound (liveness of Kafka's controlled shutdown).

Told to stop (SIGTERM, the nemesis's ``shutdown-broker`` / ``shutdown-controller``), a
RUNNING broker asks the controller to move its leaderships away (BrokerHeartbeat
``wantShutDown``) and stops once told it may (``shouldShutDown``) or after its own timeout
(kraft/node.py ``CONTROLLED_SHUTDOWN_TIMEOUT_S``, 30 s; Kafka's is 5 minutes); a leading
controller hands its quorum over first. With a controller reachable that takes a few
heartbeats (0.7 s apart here); each fault in the way (a cut, a controller election, a
pause) adds at most its hold (6 s). ``BOUND_S`` sits between the two: a controller that
never lets a broker go is caught, and no fault in the model reaches it alone.

The incarnation told to stop must have ended (exited, or lost power) by ``began + BOUND_S``.
The simulator judges it online with a timer and ``kraft-analyze`` from the ``terminate``,
``exit`` and ``crash`` events, both through ``overdue``.
"""

from __future__ import annotations

CHECK = "controlled-shutdown"
BOUND_S = 20.0
BOUND_US = int(BOUND_S * 1e6)


def overdue(node: str, began_us: int, ended_us: int | None, now_us: int) -> str | None:
    """The violation when the incarnation of ``node`` told to stop at ``began_us`` had not
    ended (``ended_us``, None if it has not) by the bound, as seen at ``now_us``."""
    end_us = now_us if ended_us is None else ended_us
    if end_us - began_us <= BOUND_US:
        return None
    return (
        f"{CHECK}: {node} was told to stop at {began_us / 1e6:.3f}s and was still running "
        f"{BOUND_S:.0f}s later"
    )
