"""How fast the simulator runs a 6-node message-passing workload.

Prints, from one run:
1. the echo scenario (6 nodes, sleeps between requests, disk appends) in virtual seconds per
   wall second, with no faults and with every fault;
2. the kafka scenario (3 controllers, 3 brokers replicating a 3-partition RF3 topic, 4
   producers with acks=all, 2 consumers and 2 group consumers committing), with no faults
   and with every fault, in virtual seconds per wall second, beside the metadata scenario on
   the same cluster (the baseline: no data plane), so the ratio is what producing,
   replicating, consuming and committing cost;
3. a tight ping-pong between 6 nodes (each node sends to the next as fast as replies come),
   as messages per wall second, in the simulator and on real asyncio over loopback TCP in
   this same process: the baseline, so the ratio is the simulator's cost per message;
4. the kafka scenario with every fault and aiokafka's lanes (``--aiokafka``) beside the same
   run without them (the baseline).

Run: .venv/bin/python bench/bench_sim.py
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

from log.runtime import Runtime
from sim.nemesis import FAULTS
from sim.run import RunConfig
from sim.scenarios.echo import run_echo
from sim.scenarios.kafka import FAULTS as KAFKA_FAULTS
from sim.scenarios.kafka import run_kafka
from sim.scenarios.metadata import run_metadata
from sim.world import World

NODES = 6
ROUNDS = 3000


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while line := await reader.readline():
        writer.write(line)
        await writer.drain()
    writer.close()


async def _pinger(host: str, port: int, rounds: int) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    for i in range(rounds):
        writer.write(b"ping %d\n" % i)
        await writer.drain()
        await reader.readline()
    writer.close()


def pingpong_sim() -> tuple[int, float]:
    world = World(seed=1)
    names = [f"n{i}" for i in range(NODES)]

    async def node(rt: Runtime, me: int) -> None:
        await asyncio.start_server(_serve, None, 9000)
        await asyncio.sleep(0.01)
        await _pinger(names[(me + 1) % NODES], 9000, ROUNDS)

    tasks = []
    for i, name in enumerate(names):
        process = world.add_process(name)
        tasks.append(process.start(lambda rt, i=i: node(rt, i)))
    started = time.perf_counter()
    world.run(asyncio.gather(*tasks))
    wall = time.perf_counter() - started
    world.close()
    return NODES * ROUNDS * 2, wall


def pingpong_real() -> tuple[int, float]:
    async def main() -> float:
        servers = [await asyncio.start_server(_serve, "127.0.0.1", 0) for _ in range(NODES)]
        ports = [s.sockets[0].getsockname()[1] for s in servers]
        started = time.perf_counter()
        await asyncio.gather(
            *(_pinger("127.0.0.1", ports[(i + 1) % NODES], ROUNDS) for i in range(NODES))
        )
        wall = time.perf_counter() - started
        for server in servers:
            server.close()
        return wall

    return NODES * ROUNDS * 2, asyncio.run(main())


def main() -> None:
    for label, faults in (("no faults", ()), ("all faults", FAULTS)):
        result = run_echo(RunConfig("echo", 1, duration_s=120, faults=faults, nodes=NODES))
        assert result.ok, result.summary()
        print(
            f"echo scenario, {NODES} nodes, {label:10}: {result.virtual_s:7.1f} virtual s in "
            f"{result.wall_s:5.2f} wall s = {result.speed:6.0f} virtual s per wall s "
            f"({result.stats['deliveries']} deliveries)"
        )
    for label, faults in (("no faults", ()), ("all faults", FAULTS)):
        kafka_faults = faults + KAFKA_FAULTS if faults else ()
        kafka = run_kafka(RunConfig("kafka", 1, duration_s=20, faults=kafka_faults))
        assert kafka.ok, kafka.summary()
        baseline = run_metadata(RunConfig("metadata", 1, duration_s=20, faults=faults))
        print(
            f"kafka scenario, 3+3 nodes, {label:10}: {kafka.virtual_s:6.1f} virtual s in "
            f"{kafka.wall_s:6.2f} wall s = {kafka.speed:5.1f} virtual s per wall s "
            f"({kafka.stats['sends']} sends, {kafka.stats['polls']} polls, "
            f"{kafka.stats['commits']} commits acknowledged); "
            f"metadata scenario (baseline) {baseline.speed:5.1f}; "
            f"ratio kafka / metadata {kafka.speed / baseline.speed:5.2f}x"
        )
    # The same all-faults run with aiokafka's lanes beside the workload's (--aiokafka): what a
    # real client's own logic, on virtual time, costs the simulator.
    config = RunConfig("kafka", 1, duration_s=20, faults=FAULTS + KAFKA_FAULTS)
    plain = run_kafka(config)
    aio = run_kafka(replace(config, aiokafka=True))
    assert plain.ok and aio.ok, (plain.summary(), aio.summary())
    print(
        f"kafka scenario + aiokafka lanes, all faults: {aio.speed:5.1f} virtual s per wall s "
        f"({aio.stats['aiokafka_sends']} aiokafka sends, {aio.stats['aiokafka_polls']} polls, "
        f"{aio.stats['aiokafka_commits']} commits); without them (baseline) {plain.speed:5.1f}; "
        f"ratio {aio.speed / plain.speed:5.2f}x"
    )
    sim_msgs, sim_wall = pingpong_sim()
    real_msgs, real_wall = pingpong_real()
    sim_rate, real_rate = sim_msgs / sim_wall, real_msgs / real_wall
    print(f"ping-pong, simulator          : {sim_rate:10.0f} messages per wall s")
    print(f"ping-pong, real asyncio+TCP   : {real_rate:10.0f} messages per wall s (baseline)")
    print(f"ratio simulator / real        : {sim_rate / real_rate:10.2f}x")


if __name__ == "__main__":
    main()
