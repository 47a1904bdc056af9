"""`liveserve bench replay`: one replay of a workload against a server, end to end over /v1/realtime."""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any, TextIO

import numpy as np

from lab.arrivals import dispatch
from lab.client.audio import load_pcm16
from lab.clips import BARGE_IN_CLIP, clip_path
from lab.metrics import RequestMetrics
from lab.replay.options import ReplayOptions
from lab.replay.plan import PlannedSession, PlannedTurn, load_requests, plan_sessions
from lab.replay.presets import PRESETS, derive_config, preset_overrides
from lab.replay.server_figures import kv_figures
from lab.replay.session_runner import SessionSetup, run_session
from lab.result_json import build_result, options_json
from lab.server_target import ServedConfig, ServerTarget, open_target
from lab.workloads import WorkloadRequest
from liveserve.config.document import Override
from liveserve.config.loader import LAB_CONFIG, LiveServeConfig, read_config_data, resolve_config_path
from liveserve.config.reader import ConfigError
from orchestrator.session.reply.registry import voice_of
from stages.models.tokenizer import TextTokenizer

WARMUP = WorkloadRequest("warmup", " Hello there.", 3, 4)
TTS_MS_PER_TOKEN = 250.0  # Piper's voice says SmolLM2's text at about this rate (96-token replies: ~24 s)


def run_replay(options: ReplayOptions, log: TextIO = sys.stderr) -> dict[str, Any]:
    """Replay the workload and return the result object (see `lab.result_json`).

    The `kv` figures come from the /metrics of a fresh server only: a running server's
    would count whatever else it served meanwhile, so with `url` they are null."""
    requests = load_requests(options, TextTokenizer.default())
    if not requests:
        raise ConfigError(f"the workload has no requests ({options.dataset} {options.dataset_path or ''})")
    if options.starts_server:
        check_preset(options)
    with open_target(options.url, options.config, server_overrides(options)) as target:
        ms_per_token = options.audio_ms_per_token or _target_ms_per_token(target)
        if ms_per_token is None:
            raise ConfigError("audio_ms_per_token is needed with url (the reply audio per text token, in ms)")
        sessions = plan_sessions(requests, options, ms_per_token)
        setup = session_setup(options, target.url, requests, log)
        asyncio.run(warm_up(setup))
        before = target.metrics() if target.is_fresh else {}
        started = time.monotonic()
        measured = asyncio.run(replay_sessions(sessions, setup, options.max_concurrency, log))
        duration_s = time.monotonic() - started
        after = target.metrics() if target.is_fresh else {}
    config = {**options_json(options), **target.description, "num_sessions": len(sessions),
              "audio_ms_per_token": ms_per_token}
    if target.is_fresh:
        config["preset"] = PRESETS[options.policy].components
    return build_result(measured, duration_s, kv_figures(before, after, duration_s), config)


def check_replay(options: ReplayOptions) -> None:
    """Fail now, not mid-sweep, on a preset this build lacks, an override the config refuses
    or a dataset file that is not there."""
    if options.dataset_path is not None and not options.dataset_path.is_file():
        raise ConfigError(f"dataset_path: no such file: {options.dataset_path}")
    if options.starts_server:
        check_preset(options)
        ServedConfig.load(options.config, server_overrides(options))


def check_preset(options: ReplayOptions) -> None:
    """PresetUnavailable if the config refuses the `policy` preset (before `--set` applies)."""
    source = resolve_config_path(options.config, LAB_CONFIG)
    derive_config(options.policy, read_config_data(source), source)


def server_overrides(options: ReplayOptions) -> tuple[Override, ...]:
    """What a fresh server's config gets, in order: the `policy` preset's settings; `server.max_sessions`
    raised, where the config's is lower, to admit the `max_concurrency` sessions the run keeps in flight
    (plus the warm-up session, which may still be closing); then `--set`'s."""
    source = resolve_config_path(options.config, LAB_CONFIG)
    data = read_config_data(source)
    return (*preset_overrides(options.policy, data, source), *_admit_in_flight(options, data), *options.overrides)


def _admit_in_flight(options: ReplayOptions, data: object) -> tuple[Override, ...]:
    if options.max_concurrency is None:
        return ()
    server = data.get("server") if isinstance(data, dict) else None
    configured = server.get("max_sessions") if isinstance(server, dict) else None
    needed = options.max_concurrency + 1
    if isinstance(configured, int) and configured >= needed:
        return ()
    return (Override(("server", "max_sessions"), needed),)


def _target_ms_per_token(target: ServerTarget) -> float | None:
    return None if target.served is None else audio_ms_per_token(target.served.config)


def audio_ms_per_token(config: LiveServeConfig) -> float:
    """Reply audio per thinker text token: through a talker, what its reply shape makes of a token; through a
    TTS stage, its measured speaking rate; a text-only pipeline plays nothing, and its replies are timed (for
    barge-in cuts) as the TTS would speak them."""
    voice = voice_of(config.pipeline)
    return TTS_MS_PER_TOKEN if voice is None or voice.ms_per_token is None else voice.ms_per_token


def session_setup(options: ReplayOptions, url: str, requests: list[WorkloadRequest], log: TextIO) -> SessionSetup:
    barge_in = load_pcm16(clip_path(BARGE_IN_CLIP)) if options.barge_in_prob > 0 else np.zeros(0, np.int16)
    speech = None
    if options.prompt_audio:
        from lab.speech import SpeechCache

        cache = SpeechCache()
        prompts = sorted({r.prompt for r in requests} | {WARMUP.prompt})
        print(f"synthesizing {len(prompts)} spoken prompts (cached in {cache.directory})", file=log)
        speech = {prompt: cache.speech(prompt) for prompt in prompts}.__getitem__
    return SessionSetup(url, barge_in, speech, options.ack_interval_s, options.request_timeout_s,
                        options.hold_until_heard)


class ServerUnavailable(RuntimeError):
    """The server did not serve the warm-up request: nothing was measured."""


async def warm_up(setup: SessionSetup) -> None:
    """One short request first, not measured: the server's first turn pays one-off start-up costs."""
    result, = await run_session(PlannedSession((PlannedTurn(WARMUP),), 0.0), setup)
    if result.is_failed:
        raise ServerUnavailable(f"the warm-up request to {setup.url} failed ({result.status}); nothing was measured")


async def replay_sessions(sessions: list[PlannedSession], setup: SessionSetup, max_concurrency: int | None,
                          log: TextIO) -> list[RequestMetrics]:
    done = 0

    async def replay_one(index: int) -> list[RequestMetrics]:
        nonlocal done
        measured = await run_session(sessions[index], setup)
        done += 1
        if done == len(sessions) or done % max(1, len(sessions) // 10) == 0:
            print(f"[{done}/{len(sessions)} sessions]", file=log, flush=True)
        return measured

    per_session = await dispatch([s.start_s for s in sessions], replay_one, max_concurrency)
    return [metrics for session in per_session for metrics in session]
