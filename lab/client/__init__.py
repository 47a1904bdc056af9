"""An asyncio client for LiveServe's (OpenAI Realtime-compatible) WebSocket API.

`RealtimeClient` speaks the protocol and records what happened; `RealtimePlayer` models
real-time playback of the reply; `run_conversation` plays a scripted conversation.
"""

from lab.client.client import RealtimeClient, RealtimeError, default_session
from lab.client.player import RealtimePlayer
from lab.client.records import LoggedEvent, TurnRecord
from lab.client.scenario import ConversationResult, ConversationScript, run_conversation
from lab.client.turns import TurnTracker

__all__ = [
    "ConversationResult", "ConversationScript", "LoggedEvent", "RealtimeClient", "RealtimeError",
    "RealtimePlayer", "TurnRecord", "TurnTracker", "default_session", "run_conversation",
]
