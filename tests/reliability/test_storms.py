"""Many clients misbehaving at once on a real server: disconnects mid-reply and more sessions than the cap.
Nothing may be left behind, no one gets a 5xx, and the server goes on serving."""

from __future__ import annotations

import asyncio
import time
import urllib.request

import websockets

from tests.liveserve.realtime.realtime_harness import Client, ServerProcess, connect, small_config

STORM = 16


async def hang_up_mid_reply(server: ServerProcess) -> None:
    async with connect(server) as ws:
        client = Client(ws)
        await client.next("session.created")
        await client.ask("Go on and on.", max_output_tokens=300, liveserve={"ignore_eos": True})
        await client.next("response.output_audio.delta", timeout=60)
    # the connection closes here, mid-reply, without a goodbye


async def knock(server: ServerProcess) -> int | None:
    """Connect once more: the close code of a refused connection, None if it was let in."""
    try:
        async with connect(server) as ws:
            await ws.recv()
            await asyncio.wait_for(ws.recv(), 2)
    except websockets.ConnectionClosed as closed:
        return closed.rcvd.code if closed.rcvd else None
    except TimeoutError:
        return None
    return None


def settled(server: ServerProcess, timeout_s: float) -> dict[str, float]:
    """Wait until no session, request or KV block is left; what /metrics says then (or at the timeout)."""
    deadline = time.monotonic() + timeout_s
    while True:
        samples = server.metrics()
        left = {key: value for key, value in samples.items()
                if key.startswith(("liveserve_kv_blocks_used", "liveserve_stage_requests", "liveserve_live_sessions"))
                and value}
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def test_a_storm_of_hang_ups_mid_reply_leaves_nothing_behind_and_the_server_serves_on(tmp_path):
    server = ServerProcess(small_config(tmp_path, max_sessions=STORM))

    async def storm_then_a_turn() -> tuple[list, list, dict]:
        hung = await asyncio.gather(*(hang_up_mid_reply(server) for _ in range(STORM)), return_exceptions=True)
        refused = await asyncio.gather(*(knock(server) for _ in range(4)))  # while it cleans up: let in or 1013
        async with connect(server) as ws:
            client = Client(ws)
            await client.next("session.created")
            await client.ask("Still there?", max_output_tokens=4)
            return hung, refused, await client.next("response.done", timeout=60)

    try:
        hung, refused, done = asyncio.run(storm_then_a_turn())
        left = settled(server, timeout_s=5)
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/health", timeout=5) as response:
            healthy = response.status
    finally:
        server.stop()
    assert [h for h in hung if isinstance(h, BaseException)] == []  # every client got its reply started
    assert all(code in (None, 1013) for code in refused)
    assert done["response"]["status"] in ("completed", "incomplete")
    assert left == {} and healthy == 200  # no session, request or KV block left behind
