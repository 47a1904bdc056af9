"""A server's /metrics as the benchmarks read it: Prometheus text exposition -> samples.

Samples are `{key: value}`, a sample's key being its name and its labels sorted by name
as the exposition writes them, e.g. `liveserve_kv_preloads_total{outcome="hit",stage="thinker"}`
(the bare name without labels). `parse_metrics` is the one parser of the text; `total`,
`label_values` and `labelled` read samples by name and labels.
"""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Mapping

from prometheus_client.parser import text_string_to_metric_families

LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n"}
UNESCAPES = {escaped: raw for raw, escaped in ESCAPES.items()}


def scrape(url: str, timeout_s: float = 5.0) -> dict[str, float]:
    """GET `url` (a server's http://.../metrics) and parse it; OSError if it does not answer."""
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        return parse_metrics(response.read().decode())


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text exposition -> {sample key: value}."""
    return {
        sample_key(sample.name, sample.labels): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def sample_key(name: str, labels: Mapping[str, str]) -> str:
    if not labels:
        return name
    return name + "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items())) + "}"


def split_key(key: str) -> tuple[str, dict[str, str]]:
    """A sample key's name and labels (the inverse of `sample_key`)."""
    name, _, labels = key.partition("{")
    return name, {label: _unescape(value) for label, value in LABEL.findall(labels)}


def labelled(samples: Mapping[str, float], name: str, labels: Mapping[str, str]) -> list[tuple[dict[str, str], float]]:
    """`(labels, value)` of every sample of `name` carrying `labels` (and any others)."""
    found = []
    for key, value in samples.items():
        sample_name, sample_labels = split_key(key)
        if sample_name == name and all(sample_labels.get(k) == v for k, v in labels.items()):
            found.append((sample_labels, value))
    return found


def total(samples: Mapping[str, float], name: str, labels: Mapping[str, str]) -> float | None:
    """Sum of the samples of `name` carrying `labels` (and any others); None if there are none."""
    values = [value for _, value in labelled(samples, name, labels)]
    return sum(values) if values else None


def label_values(samples: Mapping[str, float], name: str, label: str) -> list[str]:
    """The values label `label` takes on the samples of `name`, sorted."""
    return sorted({labels[label] for labels, _ in labelled(samples, name, {}) if label in labels})


def _escape(value: str) -> str:
    return "".join(ESCAPES.get(char, char) for char in value)


def _unescape(value: str) -> str:
    return re.sub(r"\\.", lambda match: UNESCAPES.get(match.group(), match.group()), value)
