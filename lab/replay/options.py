"""What one `liveserve bench replay` run does: the workload, the arrivals, the server."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from lab.server_process import is_loopback_url
from liveserve.config.document import Override

DATASETS = ("sharegpt", "sharegpt-zh-en", "burstgpt", "interactive", "random")
NEEDS_PATH = ("sharegpt", "sharegpt-zh-en", "burstgpt", "interactive")
TIMED_DATASETS = ("burstgpt", "interactive")


@dataclass(frozen=True)
class ReplayOptions:
    """One replay's settings; invalid values raise ValueError naming the field.

    Server: `url` of a running server, or a fresh one started from `config` (the lab's
    default, tiny-omni-cpu, when None) with the `policy` preset applied, then
    `overrides` (`--set`), in order. Workload: `dataset` read from `dataset_path` (`random` needs
    none: filler prompts and replies of `random_input_len` and `random_output_len` tokens, each drawn uniformly within
    +-`random_range_ratio` of that, as vLLM's random dataset). Arrivals: `request_rate` (req/s,
    inf = all at once) with gamma `burstiness`, capped by `max_concurrency`, or the
    trace's timestamps scaled by `time_scale` when `trace_arrivals`; with
    `hold_until_heard` a session keeps its `max_concurrency` slot until its last reply
    has been played to the end (a voice user asks the next question after listening;
    otherwise a slot frees at the last audio chunk, as `vllm bench serve` frees it at
    the last token). Prompts are text
    items, or speech when `prompt_audio`. With probability `barge_in_prob` a request
    is interrupted by the user speaking. `audio_ms_per_token` converts reply lengths
    into audio durations (from the server config when None). `simulate` names a simulation spec
    (lab.sim): the run is simulated in virtual time instead of served, on the simulated machine
    `machine_seed` draws (its steps' noise: runs with one seed meet the same machine).
    """

    dataset: str = "random"
    dataset_path: Path | None = None
    num_requests: int = 200
    seed: int = 0
    random_input_len: int = 64
    random_output_len: int = 32
    random_range_ratio: float = 0.0
    request_rate: float = math.inf
    burstiness: float = 1.0
    max_concurrency: int | None = None
    hold_until_heard: bool = False
    trace_arrivals: bool = False
    time_scale: float = 1.0
    model_filter: str | None = None
    prompt_audio: bool = False
    barge_in_prob: float = 0.0
    url: str | None = None
    config: Path | None = None
    policy: str = "fcfs-nooffload"
    overrides: tuple[Override, ...] = ()
    request_timeout_s: float = 600.0
    ack_interval_s: float = 0.2
    audio_ms_per_token: float | None = None
    simulate: str | None = None
    machine_seed: int = 0

    def __post_init__(self) -> None:
        if self.dataset not in DATASETS:
            raise ValueError(f"dataset must be one of {', '.join(DATASETS)}, got {self.dataset!r}")
        if self.dataset in NEEDS_PATH and self.dataset_path is None:
            raise ValueError(f"dataset_path is required for dataset {self.dataset!r}")
        if self.trace_arrivals and self.dataset not in TIMED_DATASETS:
            raise ValueError(f"trace_arrivals needs a dataset with timestamps ({', '.join(TIMED_DATASETS)})")
        for name in ("num_requests", "random_input_len", "random_output_len"):
            _positive_int(name, getattr(self, name))
        if self.max_concurrency is not None:
            _positive_int("max_concurrency", self.max_concurrency)
        if not isinstance(self.hold_until_heard, bool):
            raise ValueError(f"hold_until_heard must be true or false, got {self.hold_until_heard!r}")
        for name in ("request_rate", "burstiness"):
            _positive(name, getattr(self, name), allow_inf=True)
        for name in ("time_scale", "request_timeout_s", "ack_interval_s"):
            _positive(name, getattr(self, name))
        if self.audio_ms_per_token is not None:
            _positive("audio_ms_per_token", self.audio_ms_per_token)
        if not 0.0 <= self.random_range_ratio < 1.0:
            raise ValueError(f"random_range_ratio must be in [0, 1), got {self.random_range_ratio}")
        if not 0.0 <= self.barge_in_prob <= 1.0:
            raise ValueError(f"barge_in_prob must be in [0, 1], got {self.barge_in_prob}")
        if self.url is not None and self.config is not None:
            raise ValueError("give url (a running server) or config (start one), not both")
        if self.url is not None and self.overrides:
            raise ValueError("overrides (--set) configure a fresh server; not with url (a running one)")
        if self.url is not None and self.simulate is not None:
            raise ValueError("simulate runs its own simulated server: not with url (a running one)")
        if self.machine_seed and self.simulate is None:
            raise ValueError("machine_seed draws a simulated machine: only with simulate")
        if self.url is not None and not is_loopback_url(self.url):
            raise ValueError(f"url must be a loopback ws:// address, got {self.url!r}")

    @property
    def starts_server(self) -> bool:
        return self.url is None


def _positive_int(name: str, value: int) -> None:
    if value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value}")


def _positive(name: str, value: float, allow_inf: bool = False) -> None:
    if not (value > 0 and (allow_inf or math.isfinite(value))):
        raise ValueError(f"{name} must be a positive number{' or inf' if allow_inf else ''}, got {value}")
