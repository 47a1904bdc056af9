"""A realtime connection in memory: the server's end looks like Starlette's WebSocket, the client's like
a websockets connection, as far as RealtimeServer and RealtimeClient use them."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from starlette.websockets import WebSocketState
from websockets.exceptions import ConnectionClosedOK

from lab.sim.server_loop import ServerLoop

_CLOSED = object()
CLOSE_TIMEOUT_S = 10.0  # websockets' default close_timeout


class ServerEnd:
    """What RealtimeServer.serve_connection reads and writes: a message reaches the session once the server's
    loop has read it, an event reaches the client once the loop has done the work before it (see ServerLoop)."""

    def __init__(self, to_client: asyncio.Queue, from_client: asyncio.Queue, server_loop: ServerLoop) -> None:
        self.scope: dict[str, Any] = {"subprotocols": []}
        self.headers: dict[str, str] = {}
        self.query_params: dict[str, str] = {}
        self.application_state = WebSocketState.CONNECTING
        self._to_client, self._from_client = to_client, from_client
        self.server_loop = server_loop

    async def accept(self, subprotocol: str | None = None) -> None:
        self.application_state = WebSocketState.CONNECTED

    async def send_denial_response(self, response: Any) -> None:
        raise RuntimeError("a simulated server takes no api keys")

    async def receive(self) -> dict[str, Any]:
        message = await self._from_client.get()
        if message is _CLOSED:
            return {"type": "websocket.disconnect"}
        await self.server_loop.spend(self.server_loop.prices.message_s)
        return {"type": "websocket.receive", "text": message}

    async def send_text(self, text: str) -> None:
        if self.application_state is not WebSocketState.DISCONNECTED:
            self.server_loop.later(0.0, self._to_client.put_nowait, text)

    async def send_json(self, data: Any) -> None:
        await self.send_text(json.dumps(data))

    async def close(self, code: int = 1000) -> None:
        if self.application_state is not WebSocketState.DISCONNECTED:
            self.application_state = WebSocketState.DISCONNECTED
            self.server_loop.later(0.0, self._to_client.put_nowait, _CLOSED)


class ClientEnd:
    """What RealtimeClient and the duplex benchmark's streams send on, receive from and iterate over."""

    def __init__(self, to_server: asyncio.Queue, from_server: asyncio.Queue) -> None:
        self._to_server, self._from_server = to_server, from_server
        self.is_closed = False
        self.close_code: int | None = None

    async def send(self, text: str) -> None:
        if self.is_closed:
            raise ConnectionClosedOK(None, None)
        self._to_server.put_nowait(text)

    async def close(self) -> None:
        """Closes as a websockets client does: sends the close, then waits (at most CLOSE_TIMEOUT_S) for the
        server's, dropping the events before it. So a client that has closed knows the server has let the
        session go, and a session it opens next does not find the old one still holding a slot."""
        if self.is_closed:
            return
        self.is_closed, self.close_code = True, 1000
        self._to_server.put_nowait(_CLOSED)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CLOSE_TIMEOUT_S):
                while await self._from_server.get() is not _CLOSED:
                    pass

    async def recv(self) -> str:
        """The next message; ConnectionClosedOK once the server has closed."""
        try:
            return await self.__anext__()
        except StopAsyncIteration:
            raise ConnectionClosedOK(None, None) from None

    def __aiter__(self) -> ClientEnd:
        return self

    async def __anext__(self) -> str:
        message = await self._from_server.get()
        if message is _CLOSED:
            self.is_closed, self.close_code = True, 1000
            raise StopAsyncIteration
        return message


def socket_pair(server_loop: ServerLoop) -> tuple[ServerEnd, ClientEnd]:
    to_client, to_server = asyncio.Queue(), asyncio.Queue()
    return ServerEnd(to_client, to_server, server_loop), ClientEnd(to_server, to_client)
