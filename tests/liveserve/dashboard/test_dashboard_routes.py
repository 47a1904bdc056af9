"""/dashboard's routes in process: when they exist, who may use them, bad input, and what the feed says."""

from __future__ import annotations

import asyncio
import base64
import json

import pytest
from fastapi import FastAPI

from liveserve.admission import KVWatch, make_admission
from liveserve.config.document import Override
from liveserve.config.loader import LAB_CONFIG, load_config
from liveserve.dashboard.recent import RecentHistogram
from liveserve.dashboard.routes import is_dashboard_on, mount_dashboard
from liveserve.realtime.auth import ApiKeys
from liveserve.realtime.metrics import ServerMetrics
from orchestrator.snapshot import PipelineSnapshot, SessionSnapshot
from stages.engine import StageStatus
from tests.stages.scheduler_harness import FakeClock

KEY = "dash-key-1"


def config_with(*overrides: str):
    return load_config(LAB_CONFIG, [Override.parse(text) for text in overrides])


def session(session_id: str, opened_at: float, barge_in_at: float | None = None) -> SessionSnapshot:
    return SessionSnapshot(session_id, opened_at, "listening", 0.0, "", 40, 40, "device", 2.0, barge_in_at)


def thinker(steps: int, busy_s: float, counters: dict[str, int]) -> StageStatus:
    return StageStatus("thinker", 2, 1, 0, 512, 1536, 600, 0.0, 2, steps, 10 * steps, busy_s, False,
                       policy_counters=counters, kv_counters={"host_blocks_used": 1024, "reload_critical_s": 0.5,
                                                              "reload_background_s": 1.5})


class FakeOrchestrator:
    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.sessions = [session("sess_old", 1.0, barge_in_at=2.0), session("sess_new", 3.0, barge_in_at=4.0),
                         session("sess_quiet", 2.0)]
        self.status = thinker(0, 0.0, {"rounds": 0, "u0": 0, "u1": 0})

    def snapshot(self) -> PipelineSnapshot:
        ordered = tuple(sorted(self.sessions, key=lambda s: s.opened_at, reverse=True))
        return PipelineSnapshot(self.clock(), ordered, (self.status,), {"thinker": 8192})


class FakeServer:
    """What the feed reads of RealtimeServer, over a fake orchestrator and the lab config's admission."""

    def __init__(self, config) -> None:
        self.config, self.clock = config, FakeClock()
        self.orch = FakeOrchestrator(self.clock)
        self.gate = make_admission(config.admission, config.duplex.frame_ms / 1000, config.server.max_sessions)
        self.kv_watch = KVWatch(10.0, 600.0)
        self.metrics = ServerMetrics(lambda: [], self.clock)
        self.sessions = [object(), object(), object()]
        self.num_rejected, self.num_streams = 1, 0


def app_for(*overrides: str, host: str = "127.0.0.1") -> tuple[FastAPI, FakeServer]:
    config = config_with(*overrides)
    app, server = FastAPI(), FakeServer(config)
    app.state.feed = mount_dashboard(app, server, ApiKeys(config.server.api_keys), host)
    return app, server


def get(app: FastAPI, path: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    """GET `path` from the ASGI app: status, headers, body."""
    async def call():
        route, _, query = path.partition("?")
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
                 "path": route, "raw_path": route.encode(), "query_string": query.encode(), "root_path": "",
                 "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
                 "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 8000)}
        sent = []

        async def receive():
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message):
            sent.append(message)

        await app(scope, receive, send)
        start = next(m for m in sent if m["type"] == "http.response.start")
        body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
        return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}, body
    return asyncio.run(call())


def test_the_dashboard_is_on_for_a_loopback_bind_or_when_the_config_says_so():
    default, on, off = (config_with(*o).server for o in ((), ("server.dashboard=true",), ("server.dashboard=false",)))
    assert [is_dashboard_on(default, host) for host in ("127.0.0.1", "localhost", "::1", "0.0.0.0", "10.0.0.7")] == \
        [True, True, True, False, False]
    assert is_dashboard_on(on, "0.0.0.0") and not is_dashboard_on(off, "127.0.0.1")
    app, _ = app_for(host="0.0.0.0")
    assert app.state.feed is None
    assert [get(app, path)[0] for path in ("/dashboard", "/dashboard/feed", "/dashboard/static/dashboard.js")] == \
        [404] * 3
    assert get(app_for("server.dashboard=true", host="0.0.0.0")[0], "/dashboard")[0] == 200


def test_a_wrong_type_for_server_dashboard_is_one_line_naming_the_field():
    with pytest.raises(ValueError, match=r"^server.dashboard: expected bool, got 'maybe'$"):
        config_with("server.dashboard=maybe")


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_with_api_keys_every_route_needs_one_as_a_bearer_token_or_a_basic_password():
    app, _ = app_for(f"server.api_keys=[{KEY}]")
    for path in ("/dashboard", "/dashboard/feed", "/dashboard/static/uPlot.iife.min.js"):
        status, headers, body = get(app, path)
        assert status == 401 and headers["www-authenticate"].startswith("Basic realm=")
        assert "missing or wrong API key" in json.loads(body)["error"]["message"]
        assert get(app, path, Authorization=f"Bearer {KEY}")[0] == 200
        assert get(app, path, Authorization=basic("anyone", KEY))[0] == 200
    for authorization in ("Bearer wrong", basic("anyone", "wrong"), basic(KEY, ""), "Basic %%%not-base64",
                          "Basic " + base64.b64encode(b"\xff\xfe:x").decode(), "Basic"):
        assert get(app, "/dashboard/feed", Authorization=authorization)[0] == 401, authorization


@pytest.mark.parametrize("path, message", [
    ("/dashboard/feed?since=abc", "since must be a whole number >= 0, got 'abc'"),
    ("/dashboard/feed?since=-1", "since must be a whole number >= 0, got '-1'"),
    ("/dashboard/feed?since=1" + "0" * 40, "since must be a whole number >= 0"),
    ("/dashboard?every_ms=50", "every_ms must be a whole number between 100 and 10000, got '50'"),
    ("/dashboard?every_ms=1e3", "every_ms must be a whole number between 100 and 10000, got '1e3'"),
    ("/dashboard/static/routes.py", "no dashboard file 'routes.py'; there are dashboard.css, dashboard.js"),
])
def test_bad_input_gets_a_clear_error(path, message):
    status, _, body = get(app_for()[0], path)
    assert status in (400, 404) and message in json.loads(body)["error"]["message"]


def test_the_page_polls_as_often_as_asked_and_its_files_are_served():
    app, _ = app_for()
    status, headers, page = get(app, "/dashboard?every_ms=250")
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert b'data-every-ms="250"' in page and b"{{" not in page
    assert b'data-every-ms="1000"' in get(app, "/dashboard")[2]
    status, headers, script = get(app, "/dashboard/static/uPlot.iife.min.js")
    assert status == 200 and headers["content-type"].startswith("text/javascript") and b"uPlot" in script[:200]


def test_the_feed_lists_sessions_newest_first_marks_the_last_barge_in_and_sends_only_new_samples():
    app, server = app_for()
    feed, clock = app.state.feed, server.clock
    for t, steps, busy, counters in ((1.0, 0, 0.0, {"rounds": 0, "u0": 0, "u1": 0}),
                                     (2.0, 50, 0.25, {"rounds": 10, "u0": 5, "u1": 20})):
        clock.t = t
        server.orch.status = thinker(steps, busy, counters)
        feed.sample(t)
    clock.t = 5.0
    server.metrics.observe_ttfp(0.12)
    state = json.loads(get(app, "/dashboard/feed")[2])
    assert [s["id"] for s in state["sessions"]] == ["sess_new", "sess_quiet", "sess_old"]
    assert [s["last_barge_in"] for s in state["sessions"]] == [True, False, False]
    assert [s["barge_in_s"] for s in state["sessions"]] == [1.0, None, 3.0]
    stage, = state["stages"]
    assert stage["steps_per_s"] == 50.0 and stage["busy"] == 0.25 and stage["classes"] == {"u0": 0.5, "u1": 2.0}
    kv, = state["kv"]
    assert kv["device"] == 0.25 and kv["host"] == 0.125 and kv["host_blocks"] == [1024, 8192]
    assert state["admission"]["rejected_sessions"] == 1 and state["admission"]["sessions"] == 3
    assert state["latency"]["ttfp"]["count"] == 1 and state["latency"]["frame"]["count"] == 0
    series = state["series"]
    assert series["seq"] == 2 and len(series["t"]) == 2 and series["columns"]["kv.thinker.host"] == [0.125, 0.125]
    assert series["columns"]["reload.thinker.critical"] == [None, 0.0]
    newer = json.loads(get(app, "/dashboard/feed?since=1")[2])["series"]
    assert newer["seq"] == 2 and len(newer["t"]) == 1
    assert json.loads(get(app, "/dashboard/feed?since=2")[2])["series"] == {"seq": 2, "t": [], "columns": {}}


def test_recent_latencies_give_quantiles_within_buckets_and_forget_the_old():
    recent = RecentHistogram((0.1, 0.2, 0.4), window_s=30.0, slice_s=10.0)
    for value, at in ((0.05, 0.0), (0.15, 1.0), (0.15, 12.0), (0.3, 25.0), (9.0, 25.0)):
        recent.observe(value, at)
    assert recent.counts(25.0) == [1, 2, 1, 1]
    summary = recent.summary(25.0)
    assert summary["count"] == 5 and summary["p50"] == pytest.approx(0.175) and summary["p99"] == 0.4
    assert recent.counts(35.0) == [0, 1, 1, 1]  # the first slice (0-10 s) has left the window
    assert recent.summary(100.0)["p50"] is None
    with pytest.raises(ValueError, match="increasing"):
        RecentHistogram((0.2, 0.1))
