"""/dashboard in a real headless Chromium against a real server: two sessions, one barged in, seen in the DOM."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from lab.browser import HeadlessChromium, find_chromium
from tests.liveserve.realtime.realtime_harness import Client, connect, fixture_pcm16, silence

CHROMIUM = find_chromium()
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on the PATH (Debian: apt-get install chromium; "
                                "make test installs it where it can)")

# What the page shows, read from the DOM: the update count, each session row and each KV row.
READ_PAGE = """({
  updates: Number(document.body.dataset.updates),
  link: document.getElementById('link').textContent,
  sessions: [...document.querySelectorAll('#session-rows tr')].map(r => [r.dataset.session, r.dataset.state,
                                                                          r.dataset.bargeIn]),
  kv: [...document.querySelectorAll('#kv-rows tr')].map(r => [r.dataset.stage, Number(r.dataset.device)]),
  charts: document.querySelectorAll('#kv-chart canvas, #admission-chart canvas').length,
})"""


class PageWatch:
    """Reads the page every 100 ms and keeps what it saw: per session the states and barge-in marks, per KV stage
    the device occupancies, and the latest reading."""

    def __init__(self, browser: HeadlessChromium) -> None:
        self.browser = browser
        self.states: dict[str, list[str]] = {}
        self.barge_ins: dict[str, set[str]] = {}
        self.occupancy: dict[str, set[float]] = {}
        self.latest: dict = {}

    async def run(self) -> None:
        while True:
            await self.read()
            await asyncio.sleep(0.1)

    async def read(self) -> dict:
        self.latest = page = await self.browser.evaluate(READ_PAGE)
        for session, state, barge_in in page["sessions"]:
            seen = self.states.setdefault(session, [])
            if not seen or seen[-1] != state:
                seen.append(state)
            self.barge_ins.setdefault(session, set()).add(barge_in)
        for stage, device in page["kv"]:
            self.occupancy.setdefault(stage, set()).add(device)
        return page

    def state(self, session_id: str) -> str | None:
        """The state the latest reading shows for `session_id` (None: no row)."""
        return next((state for session, state, _ in self.latest["sessions"] if session == session_id), None)

    async def until(self, condition, timeout_s: float = 15.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition(await self.read()):
            if time.monotonic() > deadline:
                raise AssertionError(f"the page did not show what was awaited; it showed {self.latest}")
            await asyncio.sleep(0.1)


async def spoken_turn(client: Client) -> None:
    """The user speaks a question (server VAD ends the turn), and the short reply plays."""
    await client.send("session.update", session={"type": "realtime", "max_output_tokens": 12})
    await client.next("session.updated")
    await client.append(np.concatenate([silence(300), fixture_pcm16("q_capital_espeak_24k.wav"), silence(1200)]))
    await client.next("response.done")


async def barged_in_turn(client: Client, watch: PageWatch, session_id: str) -> None:
    """A long reply starts and the page shows it generating; the user speaks over its audio, which cuts it."""
    await client.ask("Tell me a story.", max_output_tokens=400, liveserve={"ignore_eos": True})
    await client.next("response.output_audio.delta")
    await watch.until(lambda page: watch.state(session_id) == "generating")
    await client.append(np.concatenate([fixture_pcm16("bargein_wait_espeak_24k.wav"), silence(300)]))
    await client.next("conversation.item.truncated", timeout=10)


def test_the_dashboard_shows_two_live_sessions_their_states_a_barge_in_and_the_kv_panel(server, tmp_path):
    async def scenario():
        async with HeadlessChromium(CHROMIUM) as browser:
            await browser.open(f"http://127.0.0.1:{server.port}/dashboard?every_ms=200")
            watch = PageWatch(browser)
            await watch.until(lambda page: page["updates"] > 0 and page["kv"])
            first = watch.latest
            watching = asyncio.ensure_future(watch.run())
            async with connect(server) as ws_a, connect(server) as ws_b:
                a, b = Client(ws_a), Client(ws_b)
                ids = [(await a.next("session.created"))["session"]["id"],
                       (await b.next("session.created"))["session"]["id"]]
                await asyncio.gather(spoken_turn(a), barged_in_turn(b, watch, ids[1]))
                await watch.until(lambda page: dict((s, m) for s, _, m in page["sessions"]).get(ids[1]) == "last")
                watching.cancel()
                shot = await browser.screenshot(tmp_path / "dashboard.png")
            await watch.until(lambda page: not page["sessions"])  # closed sessions leave the page
            return ids, first, watch, shot

    (a, b), first, watch, shot = asyncio.run(scenario())
    print(f"dashboard screenshot: {shot}")
    assert shot.stat().st_size > 10_000
    assert first["link"].startswith("live") and first["charts"] == 2 and not first["sessions"]
    assert {stage for stage, _ in first["kv"]} == {"thinker", "talker"}
    assert watch.latest["updates"] > first["updates"]
    # Both sessions appeared and changed state as they went: the user spoke, a reply generated.
    assert "user speaking" in watch.states[a] and {"generating", "playing"} & set(watch.states[a]), watch.states
    assert {"generating", "user speaking"} <= set(watch.states[b]), watch.states
    assert len(watch.states[a]) >= 3 and len(watch.states[b]) >= 2
    assert "last" in watch.barge_ins[b] and watch.barge_ins[a] == {""}  # only b barged in
    # The KV panel followed the sessions' context into the thinker's pool and out again.
    assert max(watch.occupancy["thinker"]) > 0 and len(watch.occupancy["thinker"]) >= 2
