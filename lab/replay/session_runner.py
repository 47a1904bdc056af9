"""Replaying one planned session over a realtime connection and measuring each request."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from lab.client.audio import SAMPLE_RATE, silence
from lab.client.client import RealtimeClient, RealtimeError, default_session
from lab.client.records import TurnRecord
from lab.metrics import RequestMetrics
from lab.replay.plan import PlannedSession, PlannedTurn

TRAILING_SILENCE_MS = 800  # after spoken input: longer than the VAD's 500 ms silence duration
TRUNCATION_WAIT_S = 5.0


@dataclass(frozen=True)
class SessionSetup:
    """What every session of a replay shares: the server, how prompts are sent, the barge-in clip.

    `speech` maps a prompt's text to 24 kHz int16 speech, or is None for text prompts.
    With `hold_until_heard` a session ends only once its last reply has been played. `clock` and
    `connect` are the client's (a simulation's virtual clock and in-memory connections).
    """

    url: str
    barge_in_pcm: np.ndarray
    speech: Any = None
    ack_interval_s: float = 0.2
    request_timeout_s: float = 600.0
    hold_until_heard: bool = False
    clock: Callable[[], float] = time.monotonic
    connect: Callable[[str], Awaitable[Any]] | None = None


async def run_session(session: PlannedSession, setup: SessionSetup) -> list[RequestMetrics]:
    """Each turn's metrics; a connection that fails marks the turns it did not finish as failed."""
    results: list[RequestMetrics] = []
    try:
        async with RealtimeClient(setup.url, clock=setup.clock, ack_interval_s=setup.ack_interval_s, keep_audio=False,
                                  connect=setup.connect) as client:
            await client.update_session(**_session_fields())
            turn_start = client.clock()
            for planned in session.turns:
                turn_start = await _pace(client, planned, turn_start, bool(results))
                results.append(await _replay_turn(client, planned, setup))
            if setup.hold_until_heard:
                await asyncio.sleep(max(0.0, _playback_end(client) - client.clock()))
    except (RealtimeError, OSError) as exc:
        status = f"error: {exc}"
        results.extend(RequestMetrics(t.request.request_id, status) for t in session.turns[len(results):])
    return results


def _session_fields() -> dict[str, Any]:
    """Server VAD that lets speech interrupt a reply but never starts one: the replay asks for
    every reply itself, with its forced length."""
    fields = default_session(max_output_tokens="inf")
    fields["audio"]["input"]["turn_detection"]["create_response"] = False
    return fields


ASKED_SILENCE_MS = _session_fields()["audio"]["input"]["turn_detection"]["silence_duration_ms"]


async def _pace(client: RealtimeClient, planned: PlannedTurn, previous_start: float, has_previous: bool) -> float:
    """Wait for a later turn's moment: the recorded think time after the previous turn's
    start, and never before its reply has been heard. Returns the turn's start."""
    if has_previous:
        heard_at = _playback_end(client)
        due = previous_start + (planned.request.think_time_s or 0.0)
        await asyncio.sleep(max(0.0, max(due, heard_at) - client.clock()))
    return client.clock()


def _playback_end(client: RealtimeClient) -> float:
    playing = client.tracker.playing
    if playing is None or playing.player.is_stopped or playing.player.drained_at is None:
        return client.clock()
    return playing.player.drained_at


async def _replay_turn(client: RealtimeClient, planned: PlannedTurn, setup: SessionSetup) -> RequestMetrics:
    request = planned.request
    sent_at = client.clock()
    first_turn = len(client.turns)
    turn_end_t = None
    if setup.speech is None:
        await client.send_text_item(request.prompt)
    else:
        turn_end_t = await _speak_prompt(client, setup.speech(request.prompt), setup.request_timeout_s)
    await client.create_response(turn_end_t, max_output_tokens=max(1, request.response_tokens),
                                 liveserve={"ignore_eos": True})
    try:
        await client.wait_until(lambda: len(client.turns) > first_turn, setup.request_timeout_s)
        turn = client.turns[first_turn]
        if planned.barge_in_after_ms is not None:
            await _barge_in(client, turn, planned.barge_in_after_ms, setup)
        await client.wait_until(lambda: turn.is_done, setup.request_timeout_s)
    except asyncio.TimeoutError:
        return _metrics(request.request_id, client.turns[first_turn] if len(client.turns) > first_turn else None,
                        sent_at, client, status="timeout")
    return _metrics(request.request_id, turn, sent_at, client)


async def _speak_prompt(client: RealtimeClient, pcm: np.ndarray, timeout_s: float) -> float:
    """Say the prompt into the mic in real time, then be silent until the server's VAD ends the turn. Returns
    when a VAD keeping up with the mic ends it: the speech's end (its start plus its length, as a mic has it
    however slowly the server takes the audio) plus the session's silence duration. The reply's TTFP counts
    from there, so a server late to hear the speech or the silence is not excused its lag."""
    since = len(client.events)
    silence_s = _silence_duration_ms(client.session) / 1000
    turn_end_t = client.clock() + len(pcm) / SAMPLE_RATE + silence_s
    await client.stream_audio(np.concatenate([pcm, silence(TRAILING_SILENCE_MS)]))
    await client.wait_for("input_audio_buffer.committed", since=since, timeout=timeout_s)
    return turn_end_t


def _silence_duration_ms(session: dict[str, Any]) -> float:
    """The server VAD's silence duration as the server's session reports it, else what the replay asked for."""
    detection = ((session.get("audio") or {}).get("input") or {}).get("turn_detection") or {}
    return detection.get("silence_duration_ms", ASKED_SILENCE_MS)


async def _barge_in(client: RealtimeClient, turn: TurnRecord, after_ms: float, setup: SessionSetup) -> None:
    """Speak the barge-in clip `after_ms` into the reply's playback, if it is still playing then.

    The client's own handling of `speech_started` stops playback and truncates the item."""
    await client.wait_until(lambda: turn.first_audio_t is not None or turn.is_done, setup.request_timeout_s)
    if turn.first_audio_t is None:
        return
    await asyncio.sleep(max(0.0, turn.first_audio_t + after_ms / 1000 - client.clock()))
    if client.tracker.in_progress(client.clock()) is not turn:
        return
    since = len(client.events)
    await client.stream_audio(np.concatenate([setup.barge_in_pcm, silence(TRAILING_SILENCE_MS)]))
    try:
        await client.wait_for("conversation.item.truncated", since=since, timeout=TRUNCATION_WAIT_S)
    except asyncio.TimeoutError:
        return


def _metrics(request_id: str, turn: TurnRecord | None, sent_at: float, client: RealtimeClient,
             status: str | None = None) -> RequestMetrics:
    if turn is None:
        return RequestMetrics(request_id, status or "failed")
    usage = turn.usage or {}
    output = usage.get("output_token_details") or {}
    unheard = _unheard(client, turn, usage)
    return RequestMetrics(
        request_id=request_id,
        status=status or turn.status or "failed",
        turn_end_s=turn.turn_end_t,
        first_text_s=turn.first_text_t,
        first_audio_s=turn.first_audio_t,
        last_audio_s=turn.last_audio_t,
        audio_ms=turn.audio_ms,
        underrun_ms=tuple(turn.player.underruns),
        e2e_s=None if turn.done_t is None else turn.done_t - sent_at,
        prompt_tokens=int(usage.get("input_tokens", 0)),
        text_tokens=int(output.get("text_tokens", 0)),
        codec_frames=int(output.get("audio_tokens", 0)),
        unheard_text_tokens=int(unheard.get("unheard_text_tokens", 0)),
        unheard_codec_frames=int(unheard.get("unheard_audio_tokens", 0)),
    )


def _unheard(client: RealtimeClient, turn: TurnRecord, usage: dict) -> dict:
    """The server's latest unheard figures for the turn's item: its last truncation, else
    the usage of a cut response."""
    for event in reversed(client.events):
        if event.type == "conversation.item.truncated" and event.data.get("item_id") == turn.item_id:
            return event.data.get("liveserve") or {}
    return usage.get("liveserve") or {}
