"""`liveserve bench duplex`: one run of continuous speech streams against a server, end to end."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TextIO

from lab.duplex.analysis import stall_threshold_s
from lab.duplex.options import DuplexOptions
from lab.duplex.poller import MetricsPoller
from lab.duplex.records import SessionLog
from lab.duplex.result import RunLog, build_result
from lab.duplex.server_config import describe, server_overrides
from lab.duplex.speech_loop import LoopedSpeech
from lab.duplex.stream import FRAME_EVENT, StreamSetup, run_stream
from lab.result_json import options_json
from lab.server_target import ServedConfig, open_target
from liveserve.config.document import Override
from liveserve.config.loader import LAB_CONFIG, read_config_data, resolve_config_path

WARMUP_S = 2.0  # the warm-up session speaks this long (at least 3 frames)
PROGRESS_EVERY_S = 10.0


class DuplexBenchError(RuntimeError):
    """The run cannot go ahead (the server does not stream duplex frames); the message says why."""


def run_duplex(options: DuplexOptions, log: TextIO = sys.stderr) -> dict[str, Any]:
    """Run the streams and return the result object (see `lab.duplex.result`)."""
    speech = LoopedSpeech.from_dir(options.speech_dir)
    overrides = fresh_server_overrides(options) if options.starts_server else ()
    with open_target(options.url, options.config, overrides) as target:
        setup = StreamSetup(target.url, speech, options.frame_ms, options.chunk_ms, time.monotonic)
        if options.warmup:
            asyncio.run(warm_up(setup, options))
        run = asyncio.run(run_streams(setup, target.metrics, options, log))
    served = {} if target.served is None else describe(target.served.config)
    return build_result(run, {**options_json(options), **target.description, **served})


def check_duplex(options: DuplexOptions) -> None:
    """Fail now, not mid-sweep, on a config or override a fresh server would refuse."""
    if options.starts_server:
        ServedConfig.load(options.config, fresh_server_overrides(options))


def fresh_server_overrides(options: DuplexOptions) -> tuple[Override, ...]:
    """The overrides of `options.config` a fresh server for `options` serves (see `server_config`)."""
    return server_overrides(options, read_config_data(resolve_config_path(options.config, LAB_CONFIG)))


def _from_now(clock: Callable[[], float]) -> Callable[[], float]:
    """`clock`, reading 0 now."""
    start = clock()
    return lambda: clock() - start


async def warm_up(setup: StreamSetup, options: DuplexOptions) -> None:
    """One short duplex session first, not measured: the server's first frames pay one-off
    costs. A server that streams no duplex frames is reported here, before the run."""
    setup = replace(setup, clock=_from_now(setup.clock))
    speak_s = max(WARMUP_S, 3 * options.frame_ms / 1000)
    session = await run_stream(SessionLog(-1, 0.0), setup, speech_start=0, stop_at=speak_s,
                               listen_until=speak_s + stall_threshold_s(options.frame_ms))
    if session.is_rejected or session.is_failed:
        why = "it was rejected (session_capacity_exceeded)" if session.is_rejected else session.failure
        raise DuplexBenchError(f"the warm-up duplex session failed: {why}")
    if not session.frames:
        raise DuplexBenchError(f"the warm-up session streamed {speak_s:g} s of speech and received no {FRAME_EVENT} "
                               "event: does the server run duplex sessions?")


async def run_streams(setup: StreamSetup, scrape: Callable[[], dict[str, float]], options: DuplexOptions,
                      log: TextIO) -> RunLog:
    """The run's streams over `setup` (its clock read from 0 at the start), the server's figures by `scrape`."""
    setup = replace(setup, clock=_from_now(setup.clock))
    clock, speech = setup.clock, setup.speech
    sessions = [SessionLog(index, at) for index, at in enumerate(options.offer_times())]
    end = options.duration_s
    listen_until = end + stall_threshold_s(options.frame_ms)  # long enough to see a stall at the very end
    poller = MetricsPoller(scrape, clock, options.poll_interval_s)
    async with asyncio.TaskGroup() as group:
        group.create_task(poller.run(listen_until))
        group.create_task(_report_progress(sessions, poller, clock, end, log))
        for session in sessions:
            await asyncio.sleep(session.offered_t - clock())
            speech_start = session.index * speech.num_samples // len(sessions)  # each stream says something else
            stop = options.stop_time(session.offered_t)
            group.create_task(run_stream(session, setup, speech_start=speech_start, stop_at=stop,
                                         listen_until=min(listen_until, stop + stall_threshold_s(options.frame_ms))))
    return RunLog(sessions, poller.polls, options.duration_s, options.frame_ms, options.ramp, poller.num_failed)


async def _report_progress(sessions: Sequence[SessionLog], poller: MetricsPoller, clock: Callable[[], float],
                           end: float, log: TextIO) -> None:
    """A line every PROGRESS_EVERY_S: how far the run is, sessions streaming, frames so far, occupancy."""
    for at in range(int(PROGRESS_EVERY_S), int(end) + 1, int(PROGRESS_EVERY_S)):
        await asyncio.sleep(at - clock())
        streaming = sum(s.stream_start_t is not None and s.end_t is None for s in sessions)
        frames = sum(len(s.frames) for s in sessions)
        occupancy = next((p.occupancy for p in reversed(poller.polls) if p.occupancy is not None), None)
        shown = "n/a" if occupancy is None else f"{occupancy:.3f}"
        print(f"[{at:>4} s / {end:g} s] {streaming} sessions streaming, {frames} frames, KV occupancy {shown}",
              file=log, flush=True)
