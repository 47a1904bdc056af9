"""The `liveserve` command line: `run`, `serve` and `plan`, and the commands plugged in from outside the
serving packages.

A plugin is an entry point in the group `liveserve.commands` (pyproject.toml): `liveserve NAME ARGS...`
loads it and calls it with ARGS, for an exit status. The lab plugs in `bench` and `client` this way, so
serving never imports the lab.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from functools import cache
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

from liveserve.audio_io import AudioError, read_wav, resample, write_wav
from liveserve.command_runner import run_command
from liveserve.config.deployment import require_runnable
from liveserve.config.document import add_override_argument
from liveserve.config.loader import check_checkpoints, load_config
from liveserve.config.reader import ConfigError
from liveserve.config.server import require_auth

ENCODER_RATE = 16000
PLUGIN_GROUP = "liveserve.commands"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    plugin = plugins().get(argv[0]) if argv else None
    if plugin is not None:
        return plugin.load()(argv[1:])
    return run_command(_parser(), argv)


@cache
def plugins() -> dict[str, EntryPoint]:
    """The installed plugin commands, by name (read once: a command line looks them up twice)."""
    return {entry.name: entry for entry in entry_points(group=PLUGIN_GROUP)}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="liveserve", description="Interaction-aware serving for omni models")
    commands = parser.add_subparsers()
    run = commands.add_parser("run", help="one turn through the pipeline's stages, a spoken reply written as WAV")
    run.add_argument("--audio", type=Path, help="the user's speech (WAV; resampled to 16 kHz)")
    run.add_argument("--text", default="", help="text prompt (with or instead of --audio)")
    run.add_argument("--out", type=Path, help="where to write the 24 kHz mono PCM16 reply (a pipeline that speaks)")
    run.add_argument("--config", type=Path, help="YAML config or a shipped config by name (default: voice-cpu)")
    add_override_argument(run, "stages.thinker.kv.num_blocks=256")
    run.add_argument("--max-tokens", type=int, help="cap on generated text tokens")
    run.add_argument("--json", action="store_true", help="print one JSON object with the figures")
    run.set_defaults(handler=_cmd_run)
    serve = commands.add_parser("serve", help="the OpenAI Realtime-compatible server")
    serve.add_argument("--config", type=Path, help="YAML config or a shipped config by name (default: voice-cpu)")
    add_override_argument(serve, "stages.thinker.scheduler.policy=fcfs")
    serve.add_argument("--host", help="interface to bind (default from config: 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default from config: 8000)")
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    serve.set_defaults(handler=_cmd_serve)
    plan = commands.add_parser("plan", help="where the config's stage replicas go on a node, and their memory")
    plan.add_argument("--config", type=Path, help="YAML config or a shipped config by name (default: voice-cpu)")
    add_override_argument(plan, "stages.thinker.replicas=2")
    plan.add_argument("--gpus", help="the node's GPUs, COUNTxSIZEGB (default: the config's runtime.gpus, else none)")
    plan.set_defaults(handler=_cmd_plan)
    for name in sorted(plugins()):  # listed here; `main` hands `NAME ...` to the plugin
        commands.add_parser(name, help=f"a plugin command: liveserve {name} --help", add_help=False)
    return parser


def _cmd_run(args: argparse.Namespace) -> int:
    from liveserve.one_turn import run_one_turn
    from orchestrator.session.events import TurnRequest

    if args.audio is None and not args.text:
        raise AudioError("give --audio WAV, --text PROMPT, or both")
    if args.max_tokens is not None and args.max_tokens <= 0:
        raise ConfigError(f"--max-tokens must be positive, got {args.max_tokens}")
    config = load_config(args.config, args.overrides)
    require_runnable(config)
    if (args.out is not None) != config.pipeline.graph.speaks:
        raise ConfigError("--out: required, the pipeline speaks" if args.out is None else
                          "--out: this pipeline makes no audio (its graph has no reply path); leave --out out")
    check_checkpoints(config)
    audio = None
    if args.audio is not None:
        samples, rate = read_wav(args.audio)
        audio = resample(samples, rate, ENCODER_RATE)
    result = asyncio.run(run_one_turn(config, audio, args.text, TurnRequest(max_tokens=args.max_tokens)))
    if args.out is not None:
        write_wav(args.out, result.audio, result.sample_rate)
    summary = result.summary()
    if args.json:
        print(json.dumps(summary))
    elif args.out is None:
        print(f"{summary['status']}: {summary['text_tokens']} tokens, the first after {summary['text_ttft_ms']} ms")
        print(f"text: {summary['text']!r}")
    else:
        print(f"{summary['status']}: {summary['audio_s']} s of audio, first audio after "
              f"{summary['audio_ttfp_ms']} ms, RTF {summary['rtf']} -> {args.out}")
        print(f"text: {summary['text']!r}")
    return 0 if result.error is None else 1


def _cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from liveserve.realtime.server import create_app

    config = load_config(args.config, args.overrides)
    require_runnable(config)
    check_checkpoints(config)
    if args.port is not None and not 0 <= args.port <= 65535:
        raise ConfigError(f"--port must be in [0, 65535], got {args.port}")
    host, port = args.host or config.server.host, config.server.port if args.port is None else args.port
    require_auth(config.server, host)
    uvicorn.run(create_app(config, host), host=host, port=port, log_level=args.log_level, ws_max_size=32 * 1024 * 1024)
    return 0


def _cmd_plan(args: argparse.Namespace) -> int:
    from liveserve.plan_command import plan_command

    print(plan_command(args.config, args.overrides, args.gpus))
    return 0


if __name__ == "__main__":
    sys.exit(main())
