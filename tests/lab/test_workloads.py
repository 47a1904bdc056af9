"""Workload loaders: published formats read exactly, vLLM's ShareGPT filter, clear errors (just over
300 lines: a few cases for each format)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from lab.workloads import (
    FillerText,
    WorkloadError,
    load_burstgpt,
    load_interactive,
    load_sharegpt,
    load_sharegpt_zh_en,
)
from stages.models.tokenizer import TextTokenizer

TOKENIZER = TextTokenizer.default()
FILLER = FillerText(TOKENIZER)
BURST_HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"
BURST3_HEADER = "Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type"


def text(num_tokens: int) -> str:
    """Text of exactly num_tokens tokens (FillerText's exactness is tested below)."""
    return FILLER.prompt(num_tokens)


def sharegpt_entry(entry_id: str, *turns: tuple[str, int]) -> dict:
    return {"id": entry_id, "conversations": [{"from": role, "value": text(n)} for role, n in turns]}


def write(tmp_path: Path, name: str, content: str) -> Path:
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    return path


def write_json(tmp_path: Path, name: str, value: object) -> Path:
    return write(tmp_path, name, json.dumps(value))


def assert_prompts_exact(requests) -> None:
    for request in requests:
        assert len(TOKENIZER.encode_literal(request.prompt)) == request.prompt_tokens


def test_filler_text_has_exactly_the_asked_token_count():
    for n in [*range(0, 3 * FILLER.paragraph_tokens + 2), 1024, 4097, 30000]:
        assert len(TOKENIZER.encode_literal(FILLER.prompt(n))) == n
    assert FILLER.prompt(37) is FILLER.prompt(37)  # equal lengths share one string
    assert FillerText(TOKENIZER).prompt(37) == FILLER.prompt(37)  # deterministic


def test_sharegpt_applies_each_vllm_filter(tmp_path):
    entries = [
        sharegpt_entry("one-turn", ("human", 10)),  # < 2 turns: dropped
        sharegpt_entry("short-prompt", ("human", 3), ("gpt", 10)),  # prompt < 4
        sharegpt_entry("short-reply", ("human", 10), ("gpt", 3)),  # response < 4
        sharegpt_entry("long-prompt", ("human", 1025), ("gpt", 10)),  # prompt > 1024
        sharegpt_entry("long-total", ("human", 1024), ("gpt", 1025)),  # 2049 > 2048
        sharegpt_entry("max-total", ("human", 1024), ("gpt", 1024)),  # 2048: kept
        sharegpt_entry("min-both", ("human", 4), ("gpt", 4)),  # 4 and 4: kept
        sharegpt_entry("gpt-first", ("gpt", 50), ("human", 6), ("gpt", 7)),  # first human is turn 1: kept
        sharegpt_entry("no-reply", ("human", 6), ("human", 7)),  # no gpt after the first human
        {"id": "empty", "conversations": []},  # < 2 turns: dropped
    ]
    requests = load_sharegpt(write_json(tmp_path, "data.json", entries), TOKENIZER)
    # 10 entries: 2 under two turns, 4 outside the length limits, 1 without a reply -> 3
    lengths = {r.request_id: (r.prompt_tokens, r.response_tokens) for r in requests}
    assert lengths == {"max-total": (1024, 1024), "min-both": (4, 4), "gpt-first": (6, 7)}
    assert_prompts_exact(requests)
    assert all(r.arrival_s is None and r.session_id is None and r.turn == 0 for r in requests)


def test_sharegpt_shuffles_like_vllm_and_takes_the_first_valid(tmp_path):
    entries = [sharegpt_entry(f"c{i}", ("human", 5 + i), ("gpt", 5)) for i in range(20)]
    entries.insert(3, sharegpt_entry("single", ("human", 9)))  # dropped before the shuffle, as in vLLM
    path = write_json(tmp_path, "data.json", entries)
    saved = random.getstate()
    for seed in (0, 7):
        expected = [e["id"] for e in entries if len(e["conversations"]) >= 2]
        random.seed(seed)  # vLLM: random.seed(seed); random.shuffle(data)
        random.shuffle(expected)
        assert [r.request_id for r in load_sharegpt(path, TOKENIZER, seed=seed)] == expected
    random.setstate(saved)
    first_five = load_sharegpt(path, TOKENIZER, num_requests=5, seed=3)
    assert first_five == load_sharegpt(path, TOKENIZER, seed=3)[:5]
    assert first_five == load_sharegpt(path, TOKENIZER, num_requests=5, seed=3)  # deterministic


def test_sharegpt_zh_en_uses_the_first_pair_with_the_same_filters(tmp_path):
    records = [
        {"conversation_id": 1, "category": "Brainstorming", "conversation": []},  # no pair: dropped
        {"conversation_id": 2, "category": "Code", "conversation": [{"human": text(3), "assistant": text(9)}]},
        {
            "conversation_id": "3",
            "category": "Chat",
            "conversation": [{"human": text(8), "assistant": text(9)}, {"human": text(1), "assistant": text(1)}],
        },
        {"conversation_id": 4, "category": "Chat", "conversation": [{"human": "你好，世界", "assistant": text(6)}]},
    ]
    content = "\n".join(json.dumps(record, ensure_ascii=False) for record in records) + "\n\n"  # blank lines skipped
    path = write(tmp_path, "common_zh.jsonl", content)
    requests = load_sharegpt_zh_en(path, TOKENIZER)
    lengths = {r.request_id: (r.prompt_tokens, r.response_tokens) for r in requests}
    assert lengths == {"3": (8, 9), "4": (len(TOKENIZER.encode_literal("你好，世界")), 6)}  # "2": prompt < 4


def burst_rows() -> list[str]:
    return [
        "100,ChatGPT,12,30,42,Conversation log",
        "101.5,GPT-4,7,0,7,API log",  # failed: 0 response tokens
        "104,GPT-4,20,5,25,API log",
        "110,ChatGPT,0,8,8,Conversation log",
    ]


def test_burstgpt_six_columns_skips_failed_rows(tmp_path):
    path = write(tmp_path, "BurstGPT_1.csv", "\n".join([BURST_HEADER, *burst_rows()]) + "\n")
    requests = load_burstgpt(path, TOKENIZER)
    assert [(r.prompt_tokens, r.response_tokens) for r in requests] == [(12, 30), (20, 5), (0, 8)]
    assert [r.request_id for r in requests] == [f"BurstGPT_1.csv line {n}" for n in (2, 4, 5)]
    assert all(r.arrival_s is None and r.session_id is None for r in requests)
    assert_prompts_exact(requests)


def test_burstgpt_columns_by_name_in_any_order(tmp_path):
    header = "Log Type,Response tokens,Extra,Request tokens,Model,Timestamp"
    rows = ["Conversation log,30,x,12,ChatGPT,100", "API log,0,x,7,GPT-4,101.5", "API log,5,x,20,GPT-4,104"]
    shuffled = load_burstgpt(write(tmp_path, "shuffled.csv", "\n".join([header, *rows])), TOKENIZER)
    assert [(r.prompt_tokens, r.response_tokens) for r in shuffled] == [(12, 30), (20, 5)]


def test_burstgpt_model_filter_arrivals_and_time_scale(tmp_path):
    path = write(tmp_path, "BurstGPT_1.csv", "\n".join([BURST_HEADER, *burst_rows()]))
    assert [r.prompt_tokens for r in load_burstgpt(path, TOKENIZER, model_filter="GPT-4")] == [20]
    chatgpt = load_burstgpt(path, TOKENIZER, model_filter="ChatGPT", trace_arrivals=True)
    assert [r.arrival_s for r in chatgpt] == [0.0, 10.0]
    # time_scale 2 replays twice as fast: arrival = (t - t0) / 2; t0 is the first kept row (100)
    fast = load_burstgpt(path, TOKENIZER, trace_arrivals=True, time_scale=2.0)
    assert [r.arrival_s for r in fast] == [0.0, 2.0, 5.0]
    assert [r.prompt_tokens for r in load_burstgpt(path, TOKENIZER, num_requests=2)] == [12, 20]


def test_burstgpt_session_variant_gives_turns_and_think_times(tmp_path):
    rows = [
        "19440110.0,s-a,43,GPT-4,906,446,1352,Conversation log",
        "19440112.0,s-b,2,ChatGPT,36,29,65,Conversation log",
        "19440120.0,s-a,8,GPT-4,100,0,100,Conversation log",  # failed: not a turn
        "19440130.0,s-a,3,GPT-4,50,20,70,Conversation log",
        "19440131.0,,3,ChatGPT,9,9,18,API log",  # no session
    ]
    path = write(tmp_path, "BurstGPT_3.csv", "\n".join([BURST3_HEADER, *rows]))
    requests = load_burstgpt(path, TOKENIZER, trace_arrivals=True, time_scale=2.0)
    got = [(r.session_id, r.turn, r.arrival_s, r.think_time_s) for r in requests]
    assert got == [("s-a", 0, 0.0, None), ("s-b", 0, 1.0, None), ("s-a", 1, 10.0, 10.0), (None, 0, 10.5, None)]
    untimed = load_burstgpt(path, TOKENIZER)
    assert [(r.session_id, r.turn, r.think_time_s) for r in untimed][2] == ("s-a", 1, None)


INTERACTIVE_RECORDS = [  # file order differs from session and turn order
    {"session_id": "b", "timestamp": 50.0, "turn": 0, "request_tokens": 5, "response_tokens": 6},
    {"session_id": "a", "timestamp": 40.0, "turn": 2, "request_tokens": 7, "response_tokens": 8},
    {"session_id": "a", "timestamp": 10.0, "turn": 1, "request_tokens": 9, "response_tokens": 10},
    {"session_id": "b", "timestamp": 56.5, "turn": 1, "request_tokens": 11, "response_tokens": 12},
]
# sessions by first timestamp: a (10), b (50); a's turns 1, 2 become 0, 1
INTERACTIVE_EXPECTED = [  # (session, turn, arrival_s, think_time_s, prompt_tokens)
    ("a", 0, 0.0, None, 9),
    ("a", 1, 30.0, 30.0, 7),
    ("b", 0, 40.0, None, 5),
    ("b", 1, 46.5, 6.5, 11),
]


def summary(requests) -> list[tuple]:
    return [(r.session_id, r.turn, r.arrival_s, r.think_time_s, r.prompt_tokens) for r in requests]


def test_interactive_jsonl_groups_sessions_with_think_times(tmp_path):
    path = write(tmp_path, "trace.jsonl", lines(*INTERACTIVE_RECORDS))
    requests = load_interactive(path, TOKENIZER)
    assert summary(requests) == INTERACTIVE_EXPECTED
    assert [r.request_id for r in requests] == ["a:0", "a:1", "b:0", "b:1"]
    assert_prompts_exact(requests)
    assert summary(load_interactive(path, TOKENIZER, num_sessions=1)) == INTERACTIVE_EXPECTED[:2]


def test_interactive_csv_matches_jsonl_and_time_scale_divides(tmp_path):
    header = "response_tokens,turn,session_id,timestamp,request_tokens,note"
    rows = [
        f"{r['response_tokens']},{r['turn']},{r['session_id']},{r['timestamp']},{r['request_tokens']},-"
        for r in INTERACTIVE_RECORDS
    ]
    path = write(tmp_path, "trace.csv", "\n".join([header, *rows]))
    assert summary(load_interactive(path, TOKENIZER)) == INTERACTIVE_EXPECTED
    halved = [(s, t, a / 2, None if k is None else k / 2, n) for s, t, a, k, n in INTERACTIVE_EXPECTED]
    assert summary(load_interactive(path, TOKENIZER, time_scale=2.0)) == halved


def lines(*records: dict) -> str:
    return "\n".join(json.dumps(record) for record in records)


ROW = {"session_id": "a", "timestamp": 1.0, "turn": 0, "request_tokens": 5, "response_tokens": 6}
NO_TURN = {k: v for k, v in ROW.items() if k != "turn"}
TWO_TURNS_BAD_VALUE = '[{"id": "x", "conversations": [{"from": "human", "value": "a"}, {"from": "gpt", "value": 3}]}]'
MALFORMED = [  # (loader, file name, content, the error message's start)
    (load_sharegpt, "data.json", '[{"id": "x", "conversations": [', "data.json line 1 column 32: bad JSON"),
    (load_sharegpt, "data.json", '{"id": "x"}', "data.json: expected a JSON array, found object"),
    (load_sharegpt, "data.json", '[{"id": "x", "conversations": []}, 5]', "data.json[1]: expected a JSON object"),
    (load_sharegpt, "data.json", '[{"id": "x"}]', "data.json[0]: missing 'conversations'"),
    (load_sharegpt, "data.json", '[{"conversations": {}}]', "data.json[0].conversations: expected a JSON array"),
    (
        load_sharegpt,
        "data.json",
        '[{"conversations": [{"from": "human"}, {}]}]',
        "data.json[0].conversations[0]: missing 'value'",
    ),
    (load_sharegpt, "data.json", TWO_TURNS_BAD_VALUE, "data.json[0].conversations[1]: 'value' is not a string"),
    (
        load_sharegpt_zh_en,
        "zh.jsonl",
        '{"conversation_id": 1, "conversation": []}\n{"conv',
        "zh.jsonl line 2: bad JSON",
    ),
    (load_sharegpt_zh_en, "zh.jsonl", '{"conversation_id": 1}', "zh.jsonl line 1: missing 'conversation'"),
    (
        load_sharegpt_zh_en,
        "zh.jsonl",
        '{"conversation_id": 1, "conversation": [{"assistant": "x"}]}',
        "zh.jsonl line 1: conversation[0]: missing 'human'",
    ),
    (load_burstgpt, "trace.csv", "", "trace.csv: empty file"),
    (
        load_burstgpt,
        "trace.csv",
        "Timestamp,Model,Request tokens,Total tokens\n1,ChatGPT,3,4\n",
        "trace.csv line 1: missing column 'Response tokens' (header: Timestamp,Model,Request tokens,Total tokens)",
    ),
    (
        load_burstgpt,
        "trace.csv",
        f"{BURST_HEADER}\n1,ChatGPT,3,4,7,API log\n2,ChatGPT,3,abc,3,API log\n",
        "trace.csv line 3: 'Response tokens' is not an integer: 'abc'",
    ),
    (
        load_burstgpt,
        "trace.csv",
        f"{BURST_HEADER}\n1,ChatGPT,-3,4,1,API log",
        "trace.csv line 2: 'Request tokens' is negative",
    ),
    (
        load_burstgpt,
        "trace.csv",
        f"{BURST_HEADER}\nsoon,ChatGPT,3,4,7,API log",
        "trace.csv line 2: 'Timestamp' is not a number",
    ),
    (
        load_burstgpt,
        "trace.csv",
        f"{BURST_HEADER}\n1,ChatGPT,3,4",
        "trace.csv line 2: expected 6 fields as in the header, found 4",
    ),
    (load_interactive, "trace.txt", "", "trace.txt: unknown extension '.txt'"),
    (
        load_interactive,
        "trace.csv",
        "session_id,timestamp,turn,request_tokens\n",
        "trace.csv line 1: missing column 'response_tokens'",
    ),
    (load_interactive, "trace.jsonl", lines(ROW, NO_TURN), "trace.jsonl line 2: missing 'turn'"),
    (load_interactive, "trace.jsonl", "[1, 2]", "trace.jsonl line 1: expected a JSON object, found array"),
    (
        load_interactive,
        "trace.jsonl",
        lines({**ROW, "response_tokens": -1}),
        "trace.jsonl line 1: 'response_tokens' is negative",
    ),
    (load_interactive, "trace.jsonl", lines({**ROW, "turn": 2.5}), "trace.jsonl line 1: 'turn' is not an integer: 2.5"),
    (load_interactive, "trace.jsonl", lines({**ROW, "session_id": ""}), "trace.jsonl line 1: 'session_id' is empty"),
    (
        load_interactive,
        "trace.jsonl",
        lines(ROW, {**ROW, "timestamp": 3.0}),
        "trace.jsonl line 2: session 'a' repeats turn 0",
    ),
    (
        load_interactive,
        "trace.jsonl",
        lines(ROW, {**ROW, "turn": 1, "timestamp": 0.5}),
        "trace.jsonl line 2: turn 1 of session 'a' is earlier than turn 0",
    ),
]


@pytest.mark.parametrize(("load", "name", "content", "message"), MALFORMED)
def test_malformed_input_names_its_location(tmp_path, load, name, content, message):
    with pytest.raises(WorkloadError) as error:
        load(write(tmp_path, name, content), TOKENIZER)
    assert str(error.value).startswith(message)
