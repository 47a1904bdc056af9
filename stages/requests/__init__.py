"""Request kinds, one per stage kind."""

from stages.requests.base import RequestStatus, StageRequest
from stages.requests.duplex import DuplexFrame, DuplexRequest
from stages.requests.encoder import EncoderRequest
from stages.requests.talker import TalkerRequest
from stages.requests.thinker import ThinkerRequest, ThinkerStep, TurnInput
from stages.requests.vocoder import VocoderRequest

__all__ = [
    "DuplexFrame", "DuplexRequest", "EncoderRequest", "RequestStatus", "StageRequest", "TalkerRequest",
    "ThinkerRequest", "ThinkerStep", "TurnInput", "VocoderRequest",
]
