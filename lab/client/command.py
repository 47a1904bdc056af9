"""`liveserve client`: speak a WAV file to a realtime server and report what came back."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from lab.client.audio import load_pcm16, write_pcm16
from lab.client.client import RealtimeError, default_session
from lab.client.scenario import ConversationScript, run_conversation
from lab.clips import BARGE_IN_CLIP, clip_path
from liveserve.audio_io import AudioError
from liveserve.command_runner import run_command


def main(argv: list[str]) -> int:
    """Speak a WAV file to a realtime server, play the reply and report it (`liveserve client ARGS`)."""
    return run_command(_parser(), argv)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="liveserve client",
                                     description="speak a WAV file to a realtime server, play and report the reply")
    parser.add_argument("--wav", type=Path, required=True, help="the user's speech (WAV; resampled to 24 kHz)")
    parser.add_argument("--url", default="ws://127.0.0.1:8000/v1/realtime", help="realtime WebSocket URL")
    parser.add_argument("--out", type=Path, help="write the reply audio as heard (24 kHz mono PCM16 WAV)")
    parser.add_argument("--barge-in-after-ms", type=float, help="speak over the reply this long after its first audio")
    parser.add_argument("--barge-in-wav", type=Path, help="what to say when barging in (default: a fixture clip)")
    parser.add_argument("--timeout", type=float, default=60.0, help="give up after this many seconds")
    parser.add_argument("--max-output-tokens", type=int, help="cap on each reply's text tokens")
    parser.add_argument("--json", action="store_true", help="print one JSON object with the figures")
    parser.set_defaults(handler=lambda args: run_client_command(
        args.wav, args.url, out=args.out, barge_in_after_ms=args.barge_in_after_ms, barge_in_wav=args.barge_in_wav,
        as_json=args.json, timeout_s=args.timeout, max_output_tokens=args.max_output_tokens))
    return parser


def run_client_command(wav: Path, url: str, *, out: Path | None = None, barge_in_after_ms: float | None = None,
                       barge_in_wav: Path | None = None, as_json: bool = False, timeout_s: float = 60.0,
                       max_output_tokens: int | None = None) -> int:
    """Run one conversation and print its figures.

    Exit status: 0 if the last response completed (or stopped at its token limit:
    `incomplete`), 1 otherwise (failed, cancelled, no response, timeout), 2 for bad
    input or a failed connection (one line on stderr). The timeout covers the whole
    conversation, listening to the reply included.
    """
    try:
        script = _script(wav, barge_in_after_ms, barge_in_wav, timeout_s, max_output_tokens)
        result = asyncio.run(run_conversation(url, script))
    except (AudioError, RealtimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if out is not None:
        write_pcm16(out, result.heard_audio())
    summary = result.summary()
    print(json.dumps(summary) if as_json else format_summary(summary))
    return 0 if result.status in ("completed", "incomplete") else 1


def _script(wav: Path, barge_in_after_ms: float | None, barge_in_wav: Path | None,
            timeout_s: float, max_output_tokens: int | None) -> ConversationScript:
    if barge_in_after_ms is not None and barge_in_after_ms < 0:
        raise AudioError(f"--barge-in-after-ms must be >= 0, got {barge_in_after_ms}")
    if timeout_s <= 0:
        raise AudioError(f"--timeout must be positive, got {timeout_s}")
    if max_output_tokens is not None and max_output_tokens <= 0:
        raise AudioError(f"--max-output-tokens must be positive, got {max_output_tokens}")
    barge_in = None
    if barge_in_after_ms is not None:
        barge_in = load_pcm16(barge_in_wav or clip_path(BARGE_IN_CLIP))
    session = default_session(max_output_tokens=max_output_tokens or "inf")
    return ConversationScript(load_pcm16(wav), barge_in, barge_in_after_ms, timeout_s=timeout_s, session=session)


def format_summary(summary: dict[str, Any]) -> str:
    """Human-readable lines: one block per response, then the final status."""
    lines = []
    for number, turn in enumerate(summary["turns"], 1):
        ttfp = "no audio" if turn["audio_ttfp_ms"] is None else f"audio TTFP {turn['audio_ttfp_ms']} ms"
        cut = ", interrupted" if turn["interrupted"] else ""
        lines.append(f"response {number} ({turn['response_id']}) {turn['status']}: {ttfp}, "
                     f"{turn['audio_s']} s of audio received ({turn['played_s']} s played{cut}), "
                     f"{turn['num_underruns']} underruns (max {turn['max_underrun_ms']} ms)")
        lines.append(f"  transcript: {turn['transcript']!r}")
    lines.extend(f"server error: {_describe(error)}" for error in summary["errors"])
    lines.append(f"status: {summary['status']}")
    return "\n".join(lines)


def _describe(error: Any) -> str:
    if isinstance(error, dict):
        return f"{error.get('code') or error.get('type')}: {error.get('message')}"
    return str(error)
