"""`liveserve bench replay --simulate SPEC`: the same replay, client and result, in virtual time over
simulated stages (the real server, sessions, schedulers, policies, KV managers and admission)."""

from __future__ import annotations

import dataclasses
import sys
import time
from typing import Any, TextIO

from lab.replay.options import ReplayOptions
from lab.replay.plan import load_requests, plan_sessions
from lab.replay.presets import PRESETS
from lab.replay.run import audio_ms_per_token, check_preset, replay_sessions, server_overrides, session_setup, warm_up
from lab.replay.server_figures import kv_figures
from lab.result_json import build_result, options_json
from lab.sim.server import SIM_URL, SimulatedConfig, SimulatedServer
from lab.sim.spec import load_spec
from lab.sim.virtual_loop import VirtualTimeLoop
from liveserve.config.reader import ConfigError
from stages.models.tokenizer import TextTokenizer


def run_simulated_replay(options: ReplayOptions, log: TextIO = sys.stderr) -> dict[str, Any]:
    """The replay's result object (see `lab.result_json`) plus `simulated`; times are virtual."""
    if options.url is not None:
        raise ConfigError("--simulate runs its own simulated server: it takes no --url")
    requests = load_requests(options, TextTokenizer.default())
    if not requests:
        raise ConfigError(f"the workload has no requests ({options.dataset} {options.dataset_path or ''})")
    check_preset(options)
    spec = dataclasses.replace(load_spec(options.simulate), machine_seed=options.machine_seed)
    sim = SimulatedConfig.load(options.config, server_overrides(options), spec)
    ms_per_token = options.audio_ms_per_token or audio_ms_per_token(sim.config)
    sessions = plan_sessions(requests, options, ms_per_token)
    started = time.perf_counter()
    loop = VirtualTimeLoop()
    try:
        measured, duration_s, kv, server_loop = loop.run_until_complete(_replay(sim, options, sessions, requests, log))
    finally:
        loop.close()
    config = {**options_json(options), **sim.describe(), "num_sessions": len(sessions),
              "audio_ms_per_token": ms_per_token, "preset": PRESETS[options.policy].components}
    result = build_result(measured, duration_s, kv, config)
    result["simulated"] = sim.simulated(time.perf_counter() - started, server_loop)
    return result


async def _replay(sim: SimulatedConfig, options: ReplayOptions, sessions, requests, log: TextIO):
    server = SimulatedServer(sim)
    await server.start()
    setup = dataclasses.replace(session_setup(options, SIM_URL, requests, log), clock=server.clock,
                                connect=server.connect)
    try:
        await warm_up(setup)
        before, started = server.metrics(), server.clock()
        measured = await replay_sessions(sessions, setup, options.max_concurrency, log)
        duration_s = server.clock() - started
        kv = kv_figures(before, server.metrics(), duration_s)
    finally:
        await server.stop()
    return measured, duration_s, kv, server.server_loop.figures()
