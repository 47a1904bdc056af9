"""A point-in-time view of the pipeline for a live display: each session's interaction and each stage's figures."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from orchestrator.config import PipelineConfig
from orchestrator.interaction.controller import InteractionController
from orchestrator.interaction.playback_board import PlaybackBoard
from stages.engine import StageStatus
from stages.interaction import PlaybackState
from stages.policies.urgency import UrgencyParams

UNFED_TOKENS = 1  # a reply's last sampled token gets its KV only when the next turn feeds it


@dataclass(frozen=True)
class SessionSnapshot:
    """One session now, as its interaction controller and the thinker stage know it.

    - `state`: `duplex` (streaming full duplex), `user speaking` (the VAD heard speech start and not yet
      its end), `generating` (a reply's turn runs), `playing` (reply audio delivered and not yet played,
      by the playback model), else `listening` (server VAD waits for speech) or `idle` (the client commits).
    - `urgency`: the class the thinker's urgency policy gives the reply's thinker request by the playback
      state published for it: `u0` at risk, `u1` no first audio yet, `u2`, `held` (at p_max_ms),
      `no telemetry`; "" while no reply generates or when the thinker's policy is not urgency. Worked out
      here by the policy's rule, not read from the stage: a stage that stopped pacing for want of KV room
      serves what this calls held.
    - `context_tokens`: the thinker context's positions; `device_tokens`: those the thinker stage reports
      with KV on the device (None: it reports none, as vLLM's does not); `kv_place`: `device` (all but a
      reply's unfed last token), else inferred, since a stage reports only what is on the device: `host`
      (the rest is on the stage's host tier, not needed yet), `in transfer` (needed now while the host tier
      holds blocks: a preload or load), `pending` (to compute: no host tier, or nothing on it); `unknown`
      where the stage reports no tokens.
    - `next_use_s`: seconds until the context is needed next (0: now). Times are the orchestrator's clock.
    """

    session_id: str
    opened_at: float
    state: str
    playback_buffer_ms: float
    urgency: str
    context_tokens: int
    device_tokens: int | None
    kv_place: str
    next_use_s: float
    last_barge_in_at: float | None


@dataclass(frozen=True)
class PipelineSnapshot:
    """The sessions (newest first) and the serving stages' statuses at `at`; `host_blocks`: each KV stage's
    host tier capacity in blocks (0: none), its replicas together."""

    at: float
    sessions: tuple[SessionSnapshot, ...]
    stages: tuple[StageStatus, ...]
    host_blocks: dict[str, int]


def take_snapshot(config: PipelineConfig, controllers: Iterable[InteractionController], statuses: list[StageStatus],
                  board: PlaybackBoard, streaming: Collection[str], now: float) -> PipelineSnapshot:
    """The snapshot of `controllers` (`streaming`: the ids of sessions in duplex mode) and `statuses`."""
    thinker = next((s for s in statuses if s.name == config.thinker.name), None)
    reports = thinker is not None and (bool(thinker.resident_tokens) or not thinker.num_requests)
    device_tokens = _tokens_per_session(thinker.resident_tokens) if reports else None
    host_used = thinker.kv_counters.get("host_blocks_used") if thinker is not None else None
    params = _urgency_params(config)
    sessions = [_session(c, board, params, None if device_tokens is None else device_tokens.get(c.session_id, 0),
                         host_used, c.session_id in streaming, now) for c in controllers]
    sessions.sort(key=lambda s: s.opened_at, reverse=True)
    return PipelineSnapshot(now, tuple(sessions), tuple(statuses), _host_blocks(config, statuses))


def _session(controller: InteractionController, board: PlaybackBoard, params: UrgencyParams | None,
             device_tokens: int | None, host_used: float | None, is_streaming: bool, now: float) -> SessionSnapshot:
    session, playback = controller.session, controller.monitor.playback
    hint = session.interaction.next_use.hint(now)
    buffer_ms = playback.buffer_ms(now)
    generating = controller.turn is not None
    urgency = classify(board.playback(session.context.thinker_id), now, params) if generating and params else ""
    context_tokens = session.context.num_tokens
    return SessionSnapshot(
        session_id=controller.session_id, opened_at=controller.opened_at,
        state=_state(controller, is_streaming, generating, buffer_ms), playback_buffer_ms=buffer_ms, urgency=urgency,
        context_tokens=context_tokens, device_tokens=device_tokens,
        kv_place="unknown" if device_tokens is None else _kv_place(context_tokens - device_tokens, host_used,
                                                                   hint.needed_now),
        next_use_s=hint.at(now) - now, last_barge_in_at=controller.last_barge_in_at)


def _urgency_params(config: PipelineConfig) -> UrgencyParams | None:
    """The thinker's urgency parameters (the defaults where none are given); None under another policy."""
    scheduler = config.thinker.scheduler
    return (scheduler.params or UrgencyParams()) if scheduler.policy == "urgency" else None


def _state(controller: InteractionController, is_streaming: bool, generating: bool, buffer_ms: float) -> str:
    if is_streaming:
        return "duplex"
    if controller.is_user_speaking:
        return "user speaking"
    if generating:
        return "generating"
    if buffer_ms > 0:
        return "playing"
    return "idle" if controller.turn_taking is None else "listening"


def classify(state: PlaybackState | None, now: float, params: UrgencyParams) -> str:
    """The urgency class of a request whose published playback state is `state` (UrgencyPolicy's rule)."""
    if state is None:
        return "no telemetry"
    if not state.started:
        return "u1"
    buffer_ms = state.buffer_ms(now)
    if buffer_ms <= params.p_safe_ms:
        return "u0"
    return "held" if buffer_ms >= params.p_max_ms else "u2"


def _kv_place(off_device: int, host_used: float | None, needed_now: bool) -> str:
    if off_device <= UNFED_TOKENS:
        return "device"
    if not host_used:
        return "pending"
    return "in transfer" if needed_now else "host"


def _tokens_per_session(resident_tokens: dict[str, int]) -> dict[str, int]:
    sessions: dict[str, int] = {}
    for request_id, tokens in resident_tokens.items():
        session = getattr(request_id, "session", request_id)
        sessions[session] = sessions.get(session, 0) + tokens
    return sessions


def _host_blocks(config: PipelineConfig, statuses: list[StageStatus]) -> dict[str, int]:
    """Host tier blocks per stage: a replica's (its KV spec's) times the replicas, counted as the device
    blocks reported over a replica's."""
    specs = {spec.name: spec for spec in config.stages}
    capacity = {}
    for status in statuses:
        spec = specs.get(status.name)
        host = spec.kv.host if spec is not None and spec.kv is not None else None
        if host is None or not status.kv_counters:
            continue
        replicas = max(1, round((status.kv_blocks_used + status.kv_blocks_free) / spec.kv.num_blocks))
        capacity[status.name] = host.num_blocks * replicas
    return capacity
