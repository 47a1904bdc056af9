"""`liveserve bench sweep`: the spec, the run loop and its reports, with a fake replay."""

from __future__ import annotations

import io
import json
import math
import re
from pathlib import Path

import pytest

from lab.replay.options import ReplayOptions
from lab.replay.presets import PresetUnavailable
from lab.sweep import load_sweep_spec, run_sweep
from liveserve.config.reader import ConfigError

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

SPEC = """
replay:
  dataset: random
  num_requests: 40
grid:
  policy: [fcfs-nooffload, liveserve]
  max_concurrency: [1, 4]
  barge_in_prob: [0.0, 0.5]
"""


def write_spec(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def distribution(p50: float | None, p90: float | None = None) -> dict:
    return {"mean": p50, "p50": p50, "p90": p90, "p95": p90, "p99": p90}


def fake_result(options: ReplayOptions) -> dict:
    """Hand-made figures: fcfs-nooffload is twice as slow as liveserve, and load multiplies."""
    c = options.max_concurrency
    ttfp = (200.0 if options.policy == "fcfs-nooffload" else 100.0) * c
    return {
        "audio_ttfp_ms": distribution(ttfp, 1.5 * ttfp),
        "text_ttft_ms": distribution(25.0 * c, 50.0 * c),
        "audio_rtf": distribution(0.25 * c),
        "e2e_ms": distribution(1000.0),
        "continuity_ok_rate": 1 - c / 10,
        "continuity": {"c50": 0.5, "c100": 1 - c / 10, "c200": 1.0},
        "completed_rps": 2.0 * c,
        "wasted_token_ratio": options.barge_in_prob / 2,
        "num_requests": 3,
        "requests": [{"request_id": f"r{i}", "audio_ttfp_ms": ttfp + i} for i in range(2)]
        + [{"request_id": "r2", "audio_ttfp_ms": None}],
    }


def no_audio_result(options: ReplayOptions) -> dict:
    """A text-only run: every audio figure is null."""
    return {
        "audio_ttfp_ms": distribution(None),
        "text_ttft_ms": distribution(30.0, 40.0),
        "audio_rtf": distribution(None),
        "continuity_ok_rate": 1.0,
        "completed_rps": 5.0,
        "wasted_token_ratio": None,
        "requests": [{"request_id": "r0", "audio_ttfp_ms": None}],
    }


# --- the spec ---


def test_points_are_the_grid_product_in_the_order_written(tmp_path):
    spec = load_sweep_spec(write_spec(tmp_path, SPEC))
    points = spec.points()
    assert [(p.policy, p.max_concurrency, p.barge_in_prob) for p in points] == [
        ("fcfs-nooffload", 1, 0.0), ("fcfs-nooffload", 1, 0.5), ("fcfs-nooffload", 4, 0.0), ("fcfs-nooffload", 4, 0.5),
        ("liveserve", 1, 0.0), ("liveserve", 1, 0.5), ("liveserve", 4, 0.0), ("liveserve", 4, 0.5),
    ]
    assert {(p.dataset, p.num_requests) for p in points} == {("random", 40)}


def test_null_and_inf_values_and_their_json_form(tmp_path):
    spec = load_sweep_spec(write_spec(tmp_path, "grid:\n  max_concurrency: [null, 2]\n  request_rate: [.inf]\n"))
    points = spec.points()
    assert [(p.max_concurrency, p.request_rate) for p in points] == [(None, math.inf), (2, math.inf)]
    assert spec.point_of(points[0]) == {"max_concurrency": None, "request_rate": "inf"}


@pytest.mark.parametrize(
    "text, message",
    [
        ("- policy\n", "expected a mapping with `replay` and `grid`, got list"),
        ("grid: {policy: [a\n", "cannot read the sweep spec"),
        ("grids: {policy: [liveserve]}\n", "grids: unknown field (did you mean 'grid'?)"),
        ("replay: {dataset: random}\n", "grid: required"),
        ("grid: [policy]\n", "grid: expected a mapping, got list"),
        ("replay: {num_requets: 4}\ngrid: {policy: [liveserve]}\n",
         "replay.num_requets: not a replay option (did you mean 'num_requests'?)"),
        ("replay: {num_requests: many}\ngrid: {policy: [liveserve]}\n",
         "replay.num_requests: expected int, got 'many'"),
        ("grid: {max_concurency: [1]}\n", "grid.max_concurency: not a replay option (did you mean 'max_concurrency'?)"),
        ("grid: {max_concurrency: 4}\n", "grid.max_concurrency: expected a non-empty list of values, got 4"),
        ("grid: {policy: []}\n", "grid.policy: expected a non-empty list of values, got []"),
        ("grid: {max_concurrency: [1, 4, x]}\n", "grid.max_concurrency[2]: expected int, got 'x'"),
        ("grid: {barge_in_prob: [0, 0.0]}\n", "grid.barge_in_prob[1]: repeats 0.0"),
        ("replay: {policy: liveserve}\ngrid: {policy: [fcfs-lru]}\n", "grid.policy: also set in replay"),
        ("replay: {url: 'ws://127.0.0.1:1'}\ngrid: {policy: [liveserve]}\n", "replay.url: not allowed in a sweep"),
        ("grid: {url: ['ws://127.0.0.1:1']}\n", "grid.url: not allowed in a sweep"),
        ("grid: {policy: [liveserve], max_concurrency: [2, 0]}\n",
         "point 2 (policy=liveserve max_concurrency=0): max_concurrency must be a positive integer, got 0"),
    ],
)
def test_spec_mistakes_name_the_file_and_the_field(tmp_path, text, message):
    path = write_spec(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_sweep_spec(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert message in str(caught.value)


def test_a_missing_spec_is_named(tmp_path):
    with pytest.raises(ConfigError, match="nope.yaml: sweep spec not found"):
        load_sweep_spec(tmp_path / "nope.yaml")


# --- running ---


def test_every_point_is_checked_before_any_runs(tmp_path):
    spec = load_sweep_spec(write_spec(tmp_path, SPEC))
    calls = []

    def check(options):
        calls.append("check")
        if options.policy == "liveserve":
            raise PresetUnavailable("policy preset 'liveserve' is not available in this build")

    with pytest.raises(PresetUnavailable, match="'liveserve' is not available"):
        run_sweep(spec, tmp_path / "out", lambda o: calls.append("run"), check, progress=io.StringIO())
    assert calls == ["check"] * 5  # the 4 fcfs-nooffload points pass, the first liveserve one fails
    assert not (tmp_path / "out").exists()


def test_a_killed_sweep_keeps_the_points_that_finished(tmp_path):
    spec = load_sweep_spec(write_spec(tmp_path, SPEC))
    seen_before = []

    def run(options):
        results = tmp_path / "out" / "results.json"
        seen_before.append(len(json.loads(results.read_text())) if results.exists() else 0)
        if len(seen_before) == 3:
            raise KeyboardInterrupt  # not an Exception: it stops the sweep
        return fake_result(options)

    with pytest.raises(KeyboardInterrupt):
        run_sweep(spec, tmp_path / "out", run, lambda o: None, progress=io.StringIO())
    assert seen_before == [0, 1, 2]  # results.json rewritten after every point
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    assert [record["point"]["barge_in_prob"] for record in saved] == [0.0, 0.5]
    assert not (tmp_path / "out" / "results.md").exists()


@pytest.fixture(scope="module")
def full_sweep(tmp_path_factory):
    """The 8-point SPEC; (fcfs-nooffload, 4, 0.5) fails, (liveserve, 1, 0.0) has no audio."""
    tmp_path = tmp_path_factory.mktemp("sweep")
    spec = load_sweep_spec(write_spec(tmp_path, SPEC))

    def run(options):
        if (options.policy, options.max_concurrency, options.barge_in_prob) == ("fcfs-nooffload", 4, 0.5):
            raise RuntimeError("server exited with code 1\nsee its log")
        if (options.policy, options.max_concurrency, options.barge_in_prob) == ("liveserve", 1, 0.0):
            return no_audio_result(options)
        return fake_result(options)

    progress = io.StringIO()
    records = run_sweep(spec, tmp_path / "out", run, lambda o: None, progress=progress)
    return records, tmp_path / "out", progress.getvalue()


def test_a_failing_point_is_recorded_and_the_sweep_goes_on(full_sweep):
    records, out, _ = full_sweep
    assert len(records) == 8
    failed = [record for record in records if record["error"] is not None]
    assert failed == [
        {
            "point": {"policy": "fcfs-nooffload", "max_concurrency": 4, "barge_in_prob": 0.5},
            "result": None,
            "error": "server exited with code 1\nsee its log",
        }
    ]
    assert records[-1]["result"]["completed_rps"] == 8.0  # (liveserve, 4, 0.5) ran after it
    assert json.loads((out / "results.json").read_text()) == records


def test_progress_is_a_line_per_update(full_sweep):
    _, _, progress = full_sweep
    lines = progress.splitlines()
    assert len(lines) == 16  # a start and an end line per point
    assert lines[0] == "[1/8] policy=fcfs-nooffload max_concurrency=1 barge_in_prob=0.0"
    assert lines[1].startswith("[1/8] done in ")
    assert lines[7].startswith("[4/8] failed after ")
    assert ": server exited with code 1 (elapsed " in lines[7]  # the message's first line only
    assert lines[15].endswith("~0m00s left)")


def test_the_markdown_table(full_sweep):
    _, out, _ = full_sweep
    markdown = (out / "results.md").read_text()
    assert "8 points, 1 failed. Every point: dataset=random num_requests=40." in markdown
    assert (
        "| policy | max_concurrency | barge_in_prob | audio TTFP P50 (ms) | audio TTFP P90 (ms) | text TTFT P90 (ms) "
        "| audio RTF mean | continuity ok-rate | completed req/s | wasted-token ratio | error |"
    ) in markdown
    # liveserve at 4: TTFP 400 / 600 ms, TTFT P90 200 ms, RTF 1.0, ok-rate 0.6, 8 req/s, half the barge-ins wasted
    assert "| liveserve | 4 | 0.5 | 400.0 | 600.0 | 200.0 | 1.000 | 0.600 | 8.00 | 0.250 | - |" in markdown
    assert "| liveserve | 1 | 0.0 | - | - | 40.0 | - | 1.000 | 5.00 | - | - |" in markdown  # no audio
    failed = "| fcfs-nooffload | 4 | 0.5 | - | - | - | - | - | - | - | server exited with code 1 see its log |"
    assert failed in markdown


def test_the_plots_are_png_files(full_sweep):
    _, out, _ = full_sweep
    markdown = (out / "results.md").read_text()
    for name in ("frontier.png", "ttfp_cdf.png", "continuity.png", "waste.png"):
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC), name
        assert int.from_bytes(data[16:20], "big") > 300, name  # IHDR width in pixels
        assert f"![{name}]({name})" in markdown


def test_plots_without_an_axis_or_values_are_skipped_and_said_so(tmp_path):
    # request_rate is the load (an infinite rate included); barge_in_prob is not varied; no audio anywhere
    spec = load_sweep_spec(write_spec(tmp_path, "grid:\n  policy: [liveserve]\n  request_rate: [.inf, 2]\n"))
    records = run_sweep(spec, tmp_path / "out", no_audio_result, lambda o: None, progress=io.StringIO())
    assert [record["point"]["request_rate"] for record in records] == ["inf", 2.0]
    markdown = (tmp_path / "out" / "results.md").read_text()
    assert "- `frontier.png` not drawn: no point has both a completed req/s and a P90 audio TTFP." in markdown
    assert "- `ttfp_cdf.png` not drawn: no request has an audio TTFP." in markdown
    assert "![continuity.png](continuity.png)" in markdown
    assert "- `waste.png` not drawn: the grid does not vary barge_in_prob." in markdown
    written = sorted(path.name for path in (tmp_path / "out").iterdir())
    assert written == ["continuity.png", "results.html", "results.json", "results.md"]
    assert "frontier.png not drawn: no point has both" in (tmp_path / "out" / "results.html").read_text()


def test_the_html_report_holds_the_table_the_plots_and_the_spec_in_one_file(full_sweep):
    _, out, _ = full_sweep
    report = (out / "results.html").read_text()
    assert report.startswith("<!DOCTYPE html>") and "8 points, 1 failed." in report
    row = "<tr><td>liveserve</td><td>4</td><td>0.5</td><td>400.0</td><td>600.0</td><td>200.0</td><td>1.000</td>"
    assert row in report
    assert "<td class=error>server exited with code 1\nsee its log</td>" in report  # the error in full
    assert report.count('src="data:image/png;base64,') == 4
    assert not re.search(r'(src|href)="(?!data:)', report)  # nothing outside the file
    assert "grid.max_concurrency" in report and "barge_in_prob: [0.0, 0.5]" in report  # the spec and its text
