"""`liveserve bench duplex --simulate SPEC`: the same streams, poller and result, in virtual time over
simulated stages (the real server, duplex hub, schedulers, windows, KV managers and admission)."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from lab.duplex.options import DuplexOptions
from lab.duplex.result import RunLog, build_result
from lab.duplex.run import fresh_server_overrides, run_streams, warm_up
from lab.duplex.server_config import describe
from lab.duplex.speech_loop import LoopedSpeech
from lab.duplex.stream import StreamSetup
from lab.result_json import options_json
from lab.sim.server import SIM_URL, SimulatedConfig, SimulatedServer
from lab.sim.spec import load_spec
from lab.sim.virtual_loop import VirtualTimeLoop


def run_simulated_duplex(options: DuplexOptions, log: TextIO = sys.stderr) -> dict[str, Any]:
    """The duplex run's result object (see `lab.duplex.result`) plus `simulated`; times are virtual."""
    speech = LoopedSpeech.from_dir(options.speech_dir)
    sim = SimulatedConfig.load(options.config, fresh_server_overrides(options), load_spec(options.simulate))
    started = time.perf_counter()
    loop = VirtualTimeLoop()
    try:
        run, server_loop = loop.run_until_complete(_duplex(sim, options, speech, log))
    finally:
        loop.close()
    result = build_result(run, {**options_json(options), **sim.describe(), **describe(sim.config)})
    result["simulated"] = sim.simulated(time.perf_counter() - started, server_loop)
    return result


async def _duplex(sim: SimulatedConfig, options: DuplexOptions, speech: LoopedSpeech,
                  log: TextIO) -> tuple[RunLog, dict[str, Any]]:
    server = SimulatedServer(sim)
    await server.start()
    setup = StreamSetup(SIM_URL, speech, options.frame_ms, options.chunk_ms, server.clock, connect=server.connect)
    try:
        if options.warmup:
            await warm_up(setup, options)
        run = await run_streams(setup, server.metrics, options, log)
    finally:
        await server.stop()
    return run, server.server_loop.figures()
