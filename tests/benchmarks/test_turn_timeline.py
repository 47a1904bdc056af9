"""turn_timeline: a turn whose thinker got its work before the turn ended, and figures only some turns have."""

import json

import pytest
from turn_timeline import summarize


def write_lines(path, lines):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_a_thinker_ready_before_the_turn_ended_counts_as_such_not_as_the_next_ready(tmp_path):
    write_lines(tmp_path / "thinker.jsonl", [
        {"t": 0.9, "dt": 0.01, "ready": ["b/thinker"], "run": [], "preempted": []},  # b's: before its turn ended
        {"t": 1.01, "dt": 0.02, "ready": ["a/thinker"], "run": [["a/thinker", 10]], "preempted": []},
        {"t": 1.05, "dt": 0.02, "ready": [], "run": [["b/thinker", 4]], "preempted": []},
    ])
    write_lines(tmp_path / "tts.jsonl", [
        {"t": 1.10, "dt": 0.05, "ready": ["a/tts", "b/tts"], "run": [["a/tts", 1], ["b/tts", 1]], "preempted": []},
    ])
    write_lines(tmp_path / "responses.jsonl", [
        {"turn_end": 1.0, "first_audio": 1.2, "requests": {"thinker": "a/thinker", "tts": "a/tts"}},
        {"turn_end": 1.0, "first_audio": 1.3, "requests": {"thinker": "b/thinker", "tts": "b/tts"}},
    ])
    count, figures = summarize(tmp_path)
    assert count == 2
    assert figures["thinker_ready"] == pytest.approx((-45.0, 10.0))  # b's came 100 ms before its turn ended
    assert figures["thinker_start"] == pytest.approx((30.0, 50.0))
    assert figures["first_audio"] == pytest.approx((250.0, 300.0))
