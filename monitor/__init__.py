"""Per-session interaction state: voice activity, playback progress, barge-in.

A leaf package: imports nothing of LiveServe's and takes frozen dataclasses.
"""
from monitor.playback import PlaybackTracker
from monitor.session_monitor import BargeIn, InteractionSnapshot, MonitorEvent, SessionMonitor
from monitor.silero import SileroVAD, VoiceConfidence
from monitor.turn_detector import (
    SpeechPaused, SpeechStarted, SpeechStopped, TurnDetectionConfig, TurnDetector, TurnEvent,
)

__all__ = [
    "BargeIn",
    "InteractionSnapshot",
    "MonitorEvent",
    "PlaybackTracker",
    "SessionMonitor",
    "SileroVAD",
    "SpeechPaused",
    "SpeechStarted",
    "SpeechStopped",
    "TurnDetectionConfig",
    "TurnDetector",
    "TurnEvent",
    "VoiceConfidence",
]
