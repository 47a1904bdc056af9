"""API keys: the config that sets them, the check, and a real server answering 401 before any session exists."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
import websockets

from liveserve.config.document import Override
from liveserve.config.loader import LAB_CONFIG
from liveserve.config.loader import load_config as load_with
from liveserve.config.reader import ConfigError
from liveserve.config.server import require_auth
from liveserve.realtime.auth import ApiKeys
from tests.liveserve.realtime.realtime_harness import ServerProcess, connect, small_config

KEY = "ls-test-key-1"


def load_config(*overrides: str):
    """The lab's config (tiny-omni-cpu) with `--set` overrides."""
    return load_with(LAB_CONFIG, [Override.parse(text) for text in overrides])


def test_a_key_is_taken_from_the_bearer_header_or_the_browser_subprotocol():
    keys = ApiKeys([KEY, "other"])
    assert keys.allows(f"Bearer {KEY}") and keys.allows("bearer other")
    assert keys.allows(None, ["realtime", f"openai-insecure-api-key.{KEY}"])
    for authorization, subprotocols in [(None, []), ("Bearer wrong", []), (KEY, []), (f"Basic {KEY}", []),
                                        (None, [f"openai-insecure-api-key.{KEY}x"]), ("Bearer é", [])]:
        assert not keys.allows(authorization, subprotocols)
    assert ApiKeys([]).allows(None) and not ApiKeys([]).required


def test_keys_come_from_the_config_and_a_file_of_keys(tmp_path):
    keys_file = tmp_path / "keys.txt"
    keys_file.write_text("# production\nfile-key-1\n\n  file-key-2  \n")
    config = load_config(f"server.api_keys=[{KEY}]", f"server.api_keys_file={keys_file}")
    assert config.server.api_keys == (KEY, "file-key-1", "file-key-2")


@pytest.mark.parametrize("override, named", [
    ("server.api_keys=abc", "server.api_keys: expected a list"),
    ("server.api_keys=[1]", "server.api_keys: a key must be"),
    ("server.api_keys=['a b']", "server.api_keys: a key must be"),
    ("server.api_keys_file=/nonexistent/keys", "server.api_keys_file: cannot read"),
])
def test_a_wrong_key_setting_is_named(override, named):
    with pytest.raises(ConfigError, match=named):
        load_config(override)


def test_serving_beyond_loopback_needs_keys_or_an_explicit_allowance():
    server = load_config().server
    for host in ("127.0.0.1", "localhost", "::1"):
        require_auth(server, host)
    with pytest.raises(ConfigError, match="server.allow_no_auth: true"):
        require_auth(server, "0.0.0.0")
    require_auth(load_config(f"server.api_keys=[{KEY}]").server, "0.0.0.0")
    require_auth(load_config("server.allow_no_auth=true").server, "0.0.0.0")


def test_serve_refuses_to_start_on_all_interfaces_without_keys_in_one_line():
    done = subprocess.run([sys.executable, "-m", "liveserve.cli", "serve", "--host", "0.0.0.0", "--port", "1"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "server.allow_no_auth" in done.stderr


def http_status(url: str, **headers) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def upgrades(server: ServerProcess, *attempts: dict) -> list[int | dict]:
    """`upgrade_status` of each attempt's connect arguments, one after another."""
    async def all_of():
        return [await upgrade_status(server, **kwargs) for kwargs in attempts]
    return asyncio.run(all_of())


async def upgrade_status(server: ServerProcess, **kwargs) -> int | dict:
    """The HTTP status refusing the upgrade, or the first event of the session it opened."""
    try:
        async with connect(server, **kwargs) as ws:
            return json.loads(await ws.recv())
    except websockets.InvalidStatus as refused:
        return refused.response.status_code


def test_a_wrong_or_missing_key_gets_401_before_any_session_state_exists(tmp_path):
    with ServerProcess(small_config(tmp_path, api_keys=[KEY])) as server:
        base = f"http://127.0.0.1:{server.port}"
        statuses = upgrades(server, {}, {"additional_headers": {"Authorization": "Bearer wrong"}},
                            {"subprotocols": ["realtime", "openai-insecure-api-key.wrong"]})
        assert statuses == [401, 401, 401]
        health = json.loads(server.get("/health"))
        metrics = urllib.request.urlopen(urllib.request.Request(
            f"{base}/metrics", headers={"Authorization": f"Bearer {KEY}"}), timeout=10).read().decode()
        assert health["sessions"] == 0 and "liveserve_live_sessions 0.0" in metrics
        assert "liveserve_rejected_sessions_total 0.0" in metrics  # not even counted as a session refused
        assert http_status(f"{base}/metrics") == 401 and http_status(f"{base}/metrics", Authorization="Bearer x") == 401
        opened = upgrades(server, {"additional_headers": {"Authorization": f"Bearer {KEY}"}},
                          {"subprotocols": ["realtime", f"openai-insecure-api-key.{KEY}"]})
        assert [event["type"] for event in opened] == ["session.created", "session.created"]
