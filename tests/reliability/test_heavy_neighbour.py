"""A client sending big messages back to back is read at `server.ingest_mib_per_s` once past its burst, while
another session on the same server is answered as promptly as ever. (benchmarks/heavy_neighbour.py measures
what a heavy neighbour does to another session's first audio.)"""

from __future__ import annotations

import asyncio
import json
import time

from tests.liveserve.realtime.realtime_harness import Client, ServerProcess, connect, small_config

MIB = 1024 * 1024
BIG = json.dumps({"type": "liveserve.nothing", "padding": "x" * (10 * MIB)})  # refused as unknown, ~10 MiB


async def flood(server: ServerProcess, answered: list[float], started: list[float]) -> None:
    """Five 10 MiB messages back to back: when the first was sent, and the time each one's error arrives."""
    async with connect(server) as ws:
        client = Client(ws)
        await client.next("session.created")
        started.append(time.monotonic())
        for _ in range(5):
            await ws.send(BIG)
        for _ in range(5):
            await client.next("error", timeout=30)
            answered.append(time.monotonic())


async def probe(server: ServerProcess, until: list[float], delays: list[float]) -> None:
    """A small event every 50 ms while the flood lasts: how long each waited for its answer."""
    async with connect(server) as ws:
        client = Client(ws)
        await client.next("session.created")
        while len(until) < 5:
            sent = time.monotonic()
            await ws.send(json.dumps({"type": "conversation.item.retrieve", "item_id": "none"}))
            await client.next("error")
            delays.append(time.monotonic() - sent)
            await asyncio.sleep(0.05)


def test_a_flood_of_big_messages_is_paced_and_another_session_is_answered_meanwhile(tmp_path):
    server = ServerProcess(small_config(tmp_path, ingest_mib_per_s=8))
    answered, delays, started = [], [], []

    async def scenario():
        await asyncio.gather(flood(server, answered, started), probe(server, answered, delays))

    try:
        asyncio.run(scenario())
    finally:
        server.stop()
    # 32 MiB of burst: the first four are read at once; 40 MiB read, the fifth waits for 8 MiB at 8 MiB/s, so it
    # cannot be answered sooner than 1 s after the flood began (a busy machine delays answers, never the floor).
    assert answered[3] - answered[0] < 0.8
    assert answered[4] - started[0] > 0.9
    assert len(delays) >= 5 and sorted(delays)[int(0.9 * len(delays))] < 0.25, delays
