"""The engine comparison's rounds: the order alternates, and the ratios reported are each one's median."""

from __future__ import annotations

import json
import sys

import pytest
import vllm_cpu_compare


def report(decode_tok_s: float) -> dict:
    return {"results": {"16": {"prefill_tok_s": 100.0, "decode_tok_s": decode_tok_s}}}


def test_rounds_alternate_the_order_and_report_median_ratios(monkeypatch, tmp_path):
    orders, rounds = [], iter([(report(110.0), report(100.0)), (report(80.0), report(100.0)),
                               (report(95.0), report(100.0))])

    def compare_once(vllm_first: bool):
        orders.append(vllm_first)
        return next(rounds)

    monkeypatch.setattr(vllm_cpu_compare, "compare_once", compare_once)
    monkeypatch.setattr(vllm_cpu_compare, "COMBINED_RESULTS", tmp_path / "engine_vs_vllm.json")
    vllm_cpu_compare.run_comparison(3)
    written = json.loads((tmp_path / "engine_vs_vllm.json").read_text())
    assert orders == [True, False, True]
    assert written["liveserve_over_vllm"] == {"16": {"prefill_tok_s": 1.0, "decode_tok_s": 0.95}}
    assert [r["liveserve_over_vllm"]["16"]["decode_tok_s"] for r in written["rounds"]] == [1.1, 0.8, 0.95]


def test_rounds_below_one_are_refused_naming_the_flag(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["vllm_cpu_compare.py", "--rounds", "0"])
    with pytest.raises(SystemExit) as exit_info:
        vllm_cpu_compare.main()
    assert exit_info.value.code == 2 and "--rounds must be at least 1, got 0" in capsys.readouterr().err
