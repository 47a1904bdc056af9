"""What one `liveserve bench duplex` run does: the streams, their arrivals, the server."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import yaml

from lab.server_process import is_loopback_url
from liveserve.config.document import Override
from orchestrator.config import ENCODER_FRAME_MS, MAX_FRAME_MS

ADMISSION_POLICIES = ("fixed", "aimd")


@dataclass(frozen=True)
class DuplexOptions:
    """One duplex run's settings; invalid values raise ValueError naming the option.

    Streams: `sessions` continuous speech streams for `duration_s`, stream i offered
    `i * stagger_ms / sessions` ms after the first (`stagger_ms` defaults to one frame
    period), each sending one append of `chunk_ms` audio per `chunk_ms` of wall clock.
    With `ramp` (sessions per second) arrivals are open-loop at that rate for the
    whole run instead, and `sessions`, if given, is the server's session limit; with
    `session_s` each admitted ramp session hangs up after that long (None: at the end).
    Server: `url` of a running one, or a fresh one from `config` (the lab's default,
    tiny-omni-cpu, when None) serving duplex frames of `frame_ms`, a thinker `window` of `window`
    tokens plus `sinks` (unbounded when None) with the `history` branch its layers keep (None: none),
    `kv_blocks` thinker KV blocks and the `admission` policy (`aimd` by default with `ramp`, else the
    config's), with `admission_set` (name, value) pairs overriding keys of its `admission` section,
    then `overrides` (`--set`) of any key (see `server_config` for the order). `simulate` names a
    simulation spec (lab.sim): that server is simulated in virtual time instead of served.
    """

    sessions: int | None = None
    duration_s: float = 60.0
    frame_ms: int = 80
    window: int | None = None
    sinks: int | None = None
    history: str | None = None
    ramp: float | None = None
    session_s: float | None = None
    admission: str | None = None
    admission_set: tuple[tuple[str, object], ...] = ()
    config: Path | None = None
    kv_blocks: int | None = None
    overrides: tuple[Override, ...] = ()
    url: str | None = None
    stagger_ms: float | None = None
    chunk_ms: int = 40
    speech_dir: Path | None = None
    poll_interval_s: float = 0.5
    warmup: bool = True
    simulate: str | None = None

    def __post_init__(self) -> None:
        self._check_streams()
        self._check_server()

    def _check_streams(self) -> None:
        if self.sessions is None and self.ramp is None:
            raise ValueError("--sessions is required (or --ramp RATE to offer sessions open-loop)")
        _positive_int("--sessions", self.sessions)
        _positive_number("--duration-s", self.duration_s)
        _positive_number("--ramp", self.ramp)
        _positive_number("--session-s", self.session_s)
        if self.session_s is not None and self.ramp is None:
            raise ValueError("--session-s needs --ramp (fixed runs stream for --duration-s)")
        _positive_number("--poll-interval-s", self.poll_interval_s)
        if not (isinstance(self.frame_ms, int) and self.frame_ms % ENCODER_FRAME_MS == 0
                and ENCODER_FRAME_MS <= self.frame_ms <= MAX_FRAME_MS):
            raise ValueError(f"--frame-ms must be a multiple of {ENCODER_FRAME_MS} in "
                             f"[{ENCODER_FRAME_MS}, {MAX_FRAME_MS}], got {self.frame_ms}")
        if not (isinstance(self.chunk_ms, int) and self.chunk_ms >= 10 and self.frame_ms % self.chunk_ms == 0):
            raise ValueError(f"--chunk-ms must be at least 10 and divide --frame-ms {self.frame_ms}, "
                             f"got {self.chunk_ms}")
        if self.stagger_ms is not None and not (0 <= self.stagger_ms < math.inf):
            raise ValueError(f"--stagger-ms must be a finite number >= 0, got {self.stagger_ms}")

    def _check_server(self) -> None:
        _positive_int("--window", self.window)
        _positive_int("--kv-blocks", self.kv_blocks)
        if self.sinks is not None:
            if self.window is None:
                raise ValueError("--sinks needs --window (sinks are part of a bounded window)")
            if not (isinstance(self.sinks, int) and self.sinks >= 0):
                raise ValueError(f"--sinks must be an integer >= 0, got {self.sinks}")
        if self.history is not None and self.window is None:
            raise ValueError("--history needs --window (the history keeps what leaves a bounded window)")
        if self.admission is not None and self.admission not in ADMISSION_POLICIES:
            raise ValueError(f"--admission must be one of {', '.join(ADMISSION_POLICIES)}, got {self.admission!r}")
        if self.url is None:
            return
        if self.simulate is not None:
            raise ValueError("--simulate runs its own simulated server: not with --url (a running one)")
        if not is_loopback_url(self.url):
            raise ValueError(f"--url must be a loopback ws:// address, got {self.url!r}")
        fresh_only = {"--config": self.config, "--window": self.window, "--kv-blocks": self.kv_blocks,
                      "--admission": self.admission, "--admission-set": self.admission_set or None,
                      "--set": self.overrides or None}
        given = [flag for flag, value in fresh_only.items() if value is not None]
        if given:
            raise ValueError(f"{', '.join(given)} configure a fresh server; not with --url (a running one)")

    @property
    def starts_server(self) -> bool:
        return self.url is None

    @property
    def admission_policy(self) -> str:
        """The admission policy to serve with: `--admission`, else aimd for a ramp (admission under
        test) and fixed for a fixed run (every stream offered is measured)."""
        return self.admission or ("aimd" if self.ramp is not None else "fixed")

    def stop_time(self, offered_t: float) -> float:
        """When a session offered at `offered_t` stops speaking (run time, s)."""
        return self.duration_s if self.session_s is None else min(self.duration_s, offered_t + self.session_s)

    def offer_times(self) -> list[float]:
        """When each session is offered, in seconds from the start of the run."""
        if self.ramp is not None:
            return [i / self.ramp for i in range(math.ceil(self.duration_s * self.ramp))]
        stagger_s = (self.frame_ms if self.stagger_ms is None else self.stagger_ms) / 1000
        return [i * stagger_s / self.sessions for i in range(self.sessions)]


def parse_settings(flag: str, items: list[str]) -> tuple[tuple[str, object], ...]:
    """NAME=VALUE strings -> (name, YAML scalar) pairs; ValueError naming `flag` for anything else."""
    pairs = []
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"{flag} takes NAME=VALUE, got {item!r}")
        pairs.append((name.strip(), yaml.safe_load(value) if value.strip() else None))
    return tuple(pairs)


def _positive_int(flag: str, value: int | None) -> None:
    if value is not None and not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        raise ValueError(f"{flag} must be an integer >= 1, got {value}")


def _positive_number(flag: str, value: float | None) -> None:
    if value is not None and not (0 < value < math.inf):
        raise ValueError(f"{flag} must be a finite number > 0, got {value}")
