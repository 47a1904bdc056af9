"""A headless Chromium driven over the DevTools protocol: open a page, read it with JavaScript, screenshot it."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import websockets

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
START_TIMEOUT_S = 20.0


class BrowserError(RuntimeError):
    """The browser did not start, or a page's script failed; the message says which and why."""


def find_chromium() -> str | None:
    """The browser to run: $LIVESERVE_CHROMIUM if set, else the first of BROWSERS on the PATH (None: none)."""
    named = os.environ.get("LIVESERVE_CHROMIUM")
    if named:
        return shutil.which(named)
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


class HeadlessChromium:
    """One headless Chromium with a fresh profile and one page, as an async context manager.

    `open(url)` loads a page and waits for it; `evaluate(js)` returns the expression's value (a promise's
    result) or raises BrowserError with the page's exception; `screenshot(path)` writes the page as PNG.
    Calls are serialized; on exit the browser's process group is ended and its profile removed.
    """

    def __init__(self, executable: str, width: int = 1400, height: int = 1600) -> None:
        self.executable, self.size = executable, (width, height)
        self._ids = itertools.count(1)
        self._lock = asyncio.Lock()
        self._profile: str | None = None
        self._process: subprocess.Popen | None = None
        self._socket = None

    async def __aenter__(self) -> HeadlessChromium:
        self._profile = tempfile.mkdtemp(prefix="liveserve-chromium-")
        flags = ["--headless", "--disable-gpu", "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                 "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
                 f"--user-data-dir={self._profile}", f"--window-size={self.size[0]},{self.size[1]}",
                 *(["--no-sandbox"] if os.geteuid() == 0 else []), "about:blank"]
        self._process = subprocess.Popen([self.executable, *flags], stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            port = await asyncio.to_thread(self._wait_for_port)
            page = await asyncio.to_thread(_page_socket_url, port)
            self._socket = await websockets.connect(page, max_size=None)
        except BaseException:
            await self.__aexit__()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._socket is not None:
            await self._socket.close()
        if self._process is not None and self._process.poll() is None:
            os.killpg(self._process.pid, signal.SIGTERM)
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self._process.pid, signal.SIGKILL)
                self._process.wait()
        if self._profile is not None:
            shutil.rmtree(self._profile, ignore_errors=True)

    def _wait_for_port(self) -> int:
        marker = Path(self._profile) / "DevToolsActivePort"
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise BrowserError(f"{self.executable} exited with code {self._process.returncode} at start")
            lines = marker.read_text().splitlines() if marker.exists() else []
            if lines and lines[0].isdigit():
                return int(lines[0])
            time.sleep(0.05)
        raise BrowserError(f"{self.executable} opened no DevTools port within {START_TIMEOUT_S:g} s")

    async def call(self, method: str, **params: Any) -> dict:
        """One DevTools command's result (events that arrive meanwhile are dropped)."""
        async with self._lock:
            number = next(self._ids)
            await self._socket.send(json.dumps({"id": number, "method": method, "params": params}))
            while True:
                message = json.loads(await self._socket.recv())
                if message.get("id") == number:
                    break
        if "error" in message:
            raise BrowserError(f"{method}: {message['error'].get('message')}")
        return message["result"]

    async def open(self, url: str, timeout_s: float = 10.0) -> None:
        await self.call("Page.navigate", url=url)
        deadline = time.monotonic() + timeout_s
        while await self.evaluate("document.readyState") != "complete":
            if time.monotonic() > deadline:
                raise BrowserError(f"{url} did not finish loading within {timeout_s:g} s")
            await asyncio.sleep(0.05)

    async def evaluate(self, expression: str) -> Any:
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            why = details.get("exception", {}).get("description") or details
            raise BrowserError(f"the page's script failed: {why}")
        return result["result"].get("value")

    async def screenshot(self, path: Path) -> Path:
        result = await self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.write_bytes(base64.b64decode(result["data"]))
        return path


def _page_socket_url(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as response:
        targets = json.load(response)
    pages = [target for target in targets if target.get("type") == "page"]
    if not pages:
        raise BrowserError("the browser has no page to drive")
    return pages[0]["webSocketDebuggerUrl"]
