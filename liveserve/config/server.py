"""The `server:` section: where the realtime server listens, its limits and who may use it."""

from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass
from pathlib import Path

from liveserve.config.reader import ConfigError, Section


@dataclass(frozen=True)
class ServerConfig:
    """The realtime server's defaults (the CLI may override host and port). `api_keys`: the keys a client
    must present (none: no check); `allow_no_auth`: serve a host other than loopback without keys;
    `dashboard`: serve GET /dashboard (true), not (false), or only on a loopback bind (null)."""

    host: str = "127.0.0.1"
    port: int = 8000
    max_sessions: int = 32
    idle_timeout_s: float = 600.0
    ingest_mib_per_s: float = 8.0  # each connection's messages are read at most this fast, after 32 MiB
    api_keys: tuple[str, ...] = ()
    allow_no_auth: bool = False
    dashboard: bool | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in [0, 65535], got {self.port}")
        if self.max_sessions <= 0:
            raise ValueError(f"max_sessions must be positive, got {self.max_sessions}")
        if not self.idle_timeout_s > 0:
            raise ValueError(f"idle_timeout_s must be positive, got {self.idle_timeout_s}")
        if not (isinstance(self.ingest_mib_per_s, (int, float)) and 0 < self.ingest_mib_per_s < math.inf):
            raise ValueError(f"ingest_mib_per_s must be a positive number, got {self.ingest_mib_per_s!r}")


def read_server(section: Section) -> ServerConfig:
    """`server:` with `api_keys` (a list of strings) and `api_keys_file` (a file of keys, one a line; blank
    lines and lines starting with # are skipped) merged into ServerConfig.api_keys."""
    keys = _key_list(section.raw("api_keys"), section.where("api_keys"))
    keys_file = section.value("api_keys_file", Path | None, None)
    if keys_file is not None:
        keys += _key_file(keys_file, section.where("api_keys_file"))
    return section.fill(ServerConfig, api_keys=tuple(keys))


def _key_list(value: object, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ConfigError(f"{where}: expected a list of keys, got {type(value).__name__}")
    for key in value:
        _check_key(key, where)
    return list(value)


def _key_file(path: Path, where: str) -> list[str]:
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read {path}: {exc.strerror}") from None
    keys = [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]
    if not keys:
        raise ConfigError(f"{where}: {path} holds no key")
    for key in keys:
        _check_key(key, where)
    return keys


def _check_key(key: object, where: str) -> None:
    if not isinstance(key, str) or not key or any(c.isspace() for c in key) or not key.isprintable():
        raise ConfigError(f"{where}: a key must be a non-empty string without spaces, got {type(key).__name__}")


def is_loopback(host: str) -> bool:
    """Whether `host` is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def require_auth(server: ServerConfig, host: str) -> None:
    """Refuse (ConfigError) to serve `host` beyond loopback without API keys, unless allowed outright."""
    if not server.api_keys and not server.allow_no_auth and not is_loopback(host):
        raise ConfigError(f"server.api_keys: serving on {host}, beyond this machine, needs API keys "
                          "(server.api_keys or server.api_keys_file); set server.allow_no_auth: true to serve "
                          "without them")
