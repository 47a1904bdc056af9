"""Workloads for trace-replay benchmarks: published datasets read as `WorkloadRequest`s.

- `load_sharegpt`, `load_sharegpt_zh_en`: ShareGPT prompts and reply lengths, sampled as vLLM does.
- `load_burstgpt`: BurstGPT request/response lengths and timestamps, filler prompts.
- `load_interactive`: multi-turn session traces (CSV or JSONL) with think times.

A file that does not match its published format raises `WorkloadError` naming the
file, line or index, and field.
"""

from lab.workloads.burstgpt import load_burstgpt
from lab.workloads.interactive import load_interactive
from lab.workloads.request import WorkloadError, WorkloadRequest
from lab.workloads.sharegpt import load_sharegpt, load_sharegpt_zh_en
from lab.workloads.synthetic_text import FillerText

__all__ = [
    "FillerText",
    "WorkloadError",
    "WorkloadRequest",
    "load_burstgpt",
    "load_interactive",
    "load_sharegpt",
    "load_sharegpt_zh_en",
]
