"""`liveserve run` end to end on the lab's config (tiny-omni), and its answers to bad input (exit 2, one clear line)."""

from __future__ import annotations

import json
import subprocess
import sys
import wave
from pathlib import Path

import numpy as np
import pytest

from lab.clips import clip_path
from liveserve.cli import main
from liveserve.config.loader import LAB_CONFIG
from tests.liveserve.config.config_variant import write_variant

CLIP = clip_path("q_capital_espeak_24k.wav")


def liveserve(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "liveserve.cli", *args], capture_output=True, text=True, timeout=120)


def write_pcm16(path: Path, samples: np.ndarray, rate: int) -> Path:
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes((samples * 32767).astype("<i2").tobytes())
    return path


def test_run_writes_a_24k_reply_and_reports_figures(tmp_path):
    out = tmp_path / "reply.wav"
    result = liveserve("run", "--config", LAB_CONFIG, "--audio", str(CLIP), "--out", str(out), "--max-tokens", "6",
                       "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["text_tokens"] <= 6 and summary["audio_ttfp_ms"] > 0 and summary["rtf"] > 0
    with wave.open(str(out), "rb") as wav:
        assert (wav.getframerate(), wav.getnchannels(), wav.getsampwidth()) == (24000, 1, 2)
        assert wav.getnframes() == summary["codec_frames"] * 1920
    assert summary["audio_s"] == pytest.approx(summary["codec_frames"] * 0.08)


@pytest.mark.parametrize("rate", [8000, 44100])
def test_other_sample_rates_are_resampled(tmp_path, rate):
    tone = 0.3 * np.sin(2 * np.pi * 220 * np.arange(rate) / rate)
    clip = write_pcm16(tmp_path / "in.wav", tone, rate)
    result = liveserve("run", "--config", LAB_CONFIG, "--audio", str(clip), "--out", str(tmp_path / "o.wav"),
                       "--max-tokens", "2", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["text_tokens"] <= 2


def bad_inputs(tmp_path: Path) -> list[tuple[tuple[str, ...], str]]:
    """Each bad command line, with what its one line of error names; `serve` comes last."""
    not_wav = tmp_path / "notes.wav"
    not_wav.write_text("this is not audio")
    empty = write_pcm16(tmp_path / "empty.wav", np.zeros(0), 24000)
    bad_config = tmp_path / "c.yaml"
    bad_config.write_text("model:\n  thinker:\n    num_heads: 5\n")
    no_weights = write_variant(tmp_path, lambda d: d["model"].update(checkpoint=str(tmp_path)))  # no files there
    out = str(tmp_path / "o.wav")
    return [
        (("run", "--audio", str(tmp_path / "missing.wav"), "--out", out), "audio file not found"),
        (("run", "--audio", str(not_wav), "--out", out), "unreadable WAV"),
        (("run", "--audio", str(empty), "--out", out), "contains no audio"),
        (("run", "--out", out), "give --audio WAV, --text PROMPT, or both"),
        (("run", "--text", "hi", "--out", out, "--max-tokens", "0"), "--max-tokens must be positive"),
        (("run", "--text", "hi"), "--out: required, the pipeline speaks"),
        (("run", "--text", "hi", "--out", out, "--config", str(bad_config)), "model.thinker"),
        (("run", "--text", "hi", "--out", out, "--config", str(no_weights)),
         "model.checkpoint: checkpoint not found: "),
        (("serve", "--config", str(no_weights)), "model.checkpoint: checkpoint not found: "),
    ]


def assert_one_clear_line(args: tuple[str, ...], status: int, stderr: str, message: str) -> None:
    assert status == 2, (args, stderr)
    assert message in stderr and "Traceback" not in stderr


def test_bad_inputs_get_one_clear_line(tmp_path, capsys):
    """The `liveserve` process answers `serve`'s bad input (in a process of its own: serving, were the check
    gone); `main`, which that process runs, answers the others here, saving a process start per input."""
    *in_process, (serve_args, serve_message) = bad_inputs(tmp_path)
    served = liveserve(*serve_args)
    assert_one_clear_line(serve_args, served.returncode, served.stderr, serve_message)
    for args, message in in_process:
        status = main(list(args))
        assert_one_clear_line(args, status, capsys.readouterr().err, message)


def test_a_pipeline_that_only_writes_runs_without_out_and_refuses_one(tmp_path, capsys):
    def text_only(data):
        data["graph"] = []
        for kind in ("encoder", "talker", "vocoder"):
            data["model"][kind] = data["stages"][kind] = None
    config = str(write_variant(tmp_path, text_only))
    result = liveserve("run", "--text", "hi", "--config", config, "--max-tokens", "4", "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert 1 <= summary["text_tokens"] <= 4 and summary["text_ttft_ms"] > 0
    assert (summary["audio_s"], summary["audio_ttfp_ms"], summary["codec_frames"]) == (0.0, None, 0)
    refused = main(["run", "--text", "hi", "--config", config, "--out", str(tmp_path / "o.wav")])
    assert refused == 2 and "--out: this pipeline makes no audio" in capsys.readouterr().err
    assert not (tmp_path / "o.wav").exists()


LAB_PACKAGES = ("lab", "lab.client")
IMPORTED_LAB = f"sorted(m for m in sys.modules if m.startswith({LAB_PACKAGES!r}))"


def test_the_serving_commands_never_import_the_benchmarks():
    code = ("import sys\nimport liveserve.cli\n"
            "liveserve.cli._parser().parse_args(['serve', '--port', '9000', '--set', 'server.max_sessions=4'])\n"
            f"print({IMPORTED_LAB})\n"
            "from lab.cli import bench_parser\nbench_parser()\n"
            f"print('lab.cli' in {IMPORTED_LAB})\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["[]", "True"]  # none, until the bench's own parser is built


def help_text(capsys, *args: str) -> str:
    """What `liveserve ARGS... --help` prints, asked of `main` in this process (argparse exits 0 after it)."""
    with pytest.raises(SystemExit) as exited:
        main([*args, "--help"])
    assert exited.value.code == 0
    return capsys.readouterr().out


def test_bench_help_is_its_own_parser_and_lists_every_benchmark(capsys):
    assert "bench" in help_text(capsys)
    bench = help_text(capsys, "bench")
    assert "usage: liveserve bench" in bench
    assert all(name in bench for name in ("engine", "replay", "sweep", "duplex"))
    assert "--set KEY.PATH=VALUE" in help_text(capsys, "bench", "replay")
    nothing = liveserve("bench")  # the command line itself, once
    assert nothing.returncode == 2 and "usage: liveserve bench" in nothing.stdout
