"""The server a benchmark measures: a fresh one, or a running one at a `--url`.

A fresh server serves a config file with overrides applied in order (a policy preset's,
a benchmark's own, then `--set`'s), validated here before it starts, so a mistake is
named by its key before anything runs; it listens on a free loopback port for the
duration of the run. A running server is known only by its realtime URL. Either way
its /metrics can be scraped.
"""

from __future__ import annotations

import contextlib
import urllib.parse
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.prometheus import scrape
from lab.server_process import ServerProcess
from liveserve.config.document import Override, apply_overrides
from liveserve.config.loader import LAB_CONFIG, LiveServeConfig, parse_config, read_config_data, resolve_config_path


@dataclass(frozen=True)
class ServedConfig:
    """A fresh server's config: the file `source` with `overrides` applied, in order."""

    source: Path
    overrides: tuple[Override, ...]
    config: LiveServeConfig

    @classmethod
    def load(cls, config: Path | None, overrides: Sequence[Override]) -> ServedConfig:
        """Read `config` (a path, a shipped config's name, None: the lab's default, tiny-omni), apply
        `overrides` and validate the result; ConfigError naming the key if it is not a valid config."""
        source = resolve_config_path(config, LAB_CONFIG)
        return cls(source, tuple(overrides), parse_config(apply_overrides(read_config_data(source), overrides), source))

    def describe(self) -> dict[str, Any]:
        """What a result records to serve the same again: `liveserve serve --config C --set O ...`."""
        return {"server_config": str(self.source), "server_overrides": [str(o) for o in self.overrides]}


@dataclass(frozen=True)
class ServerTarget:
    """A server's realtime URL, and its config when we started it (None: a running server)."""

    url: str
    served: ServedConfig | None = None

    @property
    def is_fresh(self) -> bool:
        return self.served is not None

    @property
    def description(self) -> dict[str, Any]:
        """The server as a result records it: its URL, or the config a fresh one served."""
        return {"server": self.url} if self.served is None else self.served.describe()

    def metrics(self) -> dict[str, float]:
        """Its /metrics now (`lab.prometheus` samples); OSError if it does not answer."""
        return scrape(metrics_url(self.url))


@contextlib.contextmanager
def open_target(url: str | None, config: Path | None = None,
                overrides: Sequence[Override] = ()) -> Iterator[ServerTarget]:
    """The running server at `url`, or (`url` None) a fresh one serving `config` with `overrides`,
    stopped when the block ends. ConfigError before anything starts if the config is invalid;
    ServerStartError if the server does not come up."""
    if url is not None:
        yield ServerTarget(url)
        return
    served = ServedConfig.load(config, overrides)
    with ServerProcess(served.source, served.overrides) as server:
        yield ServerTarget(server.url, served)


def metrics_url(realtime_url: str) -> str:
    """The /metrics URL of the server whose realtime endpoint is `realtime_url` (ws:// or wss://)."""
    parts = urllib.parse.urlsplit(realtime_url)
    scheme = "https" if parts.scheme == "wss" else "http"
    return urllib.parse.urlunsplit((scheme, parts.netloc, "/metrics", "", ""))
