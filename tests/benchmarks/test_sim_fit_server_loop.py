"""benchmarks/sim_fit_server_loop.py: the server loop's prices recovered from probed seconds, and the probe's
rows read as the fit reads them."""

import json

import numpy as np
import pytest
from sim_fit_server_loop import fit, loop_terms, read_seconds


def probed_second(messages: int, routed: dict, busy_s: float, t: float = 1.0) -> dict:
    return {"t": t, "wall": 1.0, "idle": 1.0 - busy_s, "messages": messages, "message_bytes": 0, "events": 0,
            "event_bytes": 0, "routed": routed, "vad_batches": 0, "vad_steps": 0, "vad_windows": 0, "vad_s": 0.0}


def test_known_prices_come_back_from_seconds_of_varied_work(tmp_path):
    rng = np.random.default_rng(0)
    seconds = []
    for t in range(40):
        messages, talker, vocoder = (int(n) for n in rng.integers(0, 800, 3))  # busy < 1 s
        busy = 0.0002 * messages + 0.0005 * (talker + vocoder)
        seconds.append(probed_second(messages, {"talker": talker, "vocoder": vocoder}, busy, float(t)))
    probe = tmp_path / "probe.jsonl"
    probe.write_text("".join(json.dumps(s) + "\n" for s in [probed_second(0, {}, 0.0, 0.0), *seconds]))
    read = read_seconds([probe])
    assert len(read) == 40  # the loop's first second (its start) is left out
    prices, residuals = fit([loop_terms(s) for s in read], [s["wall"] - s["idle"] for s in read])
    assert prices == pytest.approx([0.0002, 0.0005], rel=1e-6)
    assert np.abs(residuals).max() < 1e-9


def test_no_price_comes_out_negative():
    seconds = [probed_second(1000, {"talker": 0}, 0.1), probed_second(0, {"talker": 1000}, 0.0),
               probed_second(1000, {"talker": 1000}, 0.05)]
    prices, _ = fit([loop_terms(s) for s in seconds], [s["wall"] - s["idle"] for s in seconds])
    assert (prices >= 0).all() and prices[0] > 0


def test_seconds_the_loop_was_saturated_are_left_out(tmp_path):
    probe = tmp_path / "probe.jsonl"
    seconds = [probed_second(0, {}, 0.0, 0.0), probed_second(100, {}, 0.5), probed_second(100, {}, 0.9)]
    probe.write_text("".join(json.dumps(s) + "\n" for s in seconds))
    assert [s["idle"] for s in read_seconds([probe], max_busy=0.85)] == [0.5]
    assert len(read_seconds([probe])) == 2
