"""One spoken question in a fresh session, timed from the end of the user's speech: what the voice
benchmarks measure (end of speech -> first reply audio, with the parts the server's events show)."""

from __future__ import annotations

import numpy as np

from lab.client import RealtimeClient, default_session
from lab.client.audio import SAMPLE_RATE, silence

TRAILING_MS, MIC_MS, TURN_TIMEOUT_S = 1000, 20, 60.0
TRANSCRIBED = "conversation.item.input_audio_transcription.completed"


async def spoken_turn(url: str, clip: np.ndarray, reply_tokens: int, transcription: bool = False,
                      turn_detection: dict | None = None) -> dict:
    """Speak `clip` in real time, listen until the reply has played; the turn's times in ms. The session's
    `turn_detection` is the given one (None: the lab client's server VAD, 500 ms of silence).

    `end_of_speech_ms`: from when the client sent the audio where the server's VAD says speech ended to
    the first audio delta (a server slow to see the end counts too; the VAD's silence wait is in it).
    `ttfp_ms`: speech_stopped received -> first audio. `endpoint_ms`: end of speech -> speech_stopped;
    with input `transcription` on, `asr_tail_ms`: speech_stopped -> the transcript.
    `text`, `transcript`: the reply's words and what the user was heard to say, when there are any."""
    async with RealtimeClient(url) as client:
        session = default_session(max_output_tokens=reply_tokens)
        if transcription:
            session["audio"]["input"]["transcription"] = {"model": "whisper-1"}
        if turn_detection is not None:
            session["audio"]["input"]["turn_detection"] = turn_detection
        await client.update_session(**session)
        await client.stream_audio(np.concatenate([clip, silence(TRAILING_MS)]))
        deadline = client.clock() + TURN_TIMEOUT_S
        while not (client.turns and all(t.is_done for t in client.turns) and not client.is_playing()):
            if client.clock() > deadline:
                return {"failure": "timeout"}
            await client.stream_audio(silence(MIC_MS))  # the mic goes on, as a real one does
        turn, stopped = client.turns[0], client.last_event("input_audio_buffer.speech_stopped")
        if turn.first_audio_t is None or stopped is None:
            return {"failure": f"no audio (status {turn.status})"}
        spoken_end_t = sent_at(client, stopped.data["audio_end_ms"])
        timed = {"end_of_speech_ms": _ms(turn.first_audio_t - spoken_end_t), "ttfp_ms": round(turn.ttfp_ms, 1),
                 "endpoint_ms": _ms(stopped.t - spoken_end_t), "status": turn.status, "text": turn.transcript}
        transcribed = client.last_event(TRANSCRIBED)
        if transcribed is not None:
            timed |= {"asr_tail_ms": _ms(transcribed.t - stopped.t), "transcript": transcribed.data["transcript"]}
        return timed


def sent_at(client: RealtimeClient, audio_ms: float) -> float:
    """When the client sent the input audio at `audio_ms` of the session's stream."""
    sent_ms = 0.0
    for event in client.sent:
        if event.type == "input_audio_buffer.append":
            sent_ms += event.data["audio_bytes"] * 1000 / (2 * SAMPLE_RATE)
            if sent_ms >= audio_ms:
                return event.t
    raise ValueError(f"the client never sent audio at {audio_ms} ms")


def _ms(seconds: float) -> float:
    return round(1000 * seconds, 1)
