"""An asyncio client for LiveServe's (OpenAI Realtime-compatible) WebSocket API.

`RealtimeClient` speaks the protocol and records what happened; `RealtimePlayer` models
real-time playback of the reply; `run_conversation` plays a scripted conversation.
"""

from liveserve.realtime_client.client import RealtimeClient, RealtimeError, default_session
from liveserve.realtime_client.player import RealtimePlayer
from liveserve.realtime_client.records import LoggedEvent, TurnRecord
from liveserve.realtime_client.scenario import ConversationResult, ConversationScript, run_conversation
from liveserve.realtime_client.turns import TurnTracker

__all__ = [
    "ConversationResult", "ConversationScript", "LoggedEvent", "RealtimeClient", "RealtimeError",
    "RealtimePlayer", "TurnRecord", "TurnTracker", "default_session", "run_conversation",
]
