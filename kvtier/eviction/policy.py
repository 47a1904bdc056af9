"""What an eviction policy is: an order over candidate sequences, from per-sequence hints."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar


@dataclass
class UsageHint:
    """What a policy may know of one sequence, in clock seconds.

    `last_used`: when the sequence was last used (reserved while evictable, or marked
    evictable or in use). `next_use`: when it is next expected to run (inf: no
    prediction, so it goes first under next_use).
    """

    last_used: float = 0.0
    next_use: float = math.inf


class EvictionPolicy(ABC):
    """Orders the device tier's eviction candidates; the manager does everything else.

    Mechanism (the manager) decides who is a candidate (marked evictable, not
    protected, no transfer in flight, device blocks backed by valid host copies),
    keeps candidates in a heap keyed by `key`, re-keys one whenever its hint changes,
    and evicts smallest key first, each victim's suffix blocks first, either exactly
    the blocks asked for or none. A policy only orders:

    - `key(hint)`: smaller is evicted first; a pure function of the hint, cheap (it
      runs on every hint change of a candidate).
    - `may_displace(victim, loader)`: whether a *background* load of a sequence with
      hint `loader` may evict a candidate with hint `victim` (foreground loads may
      evict any candidate). It must be monotone in key order: once it refuses a
      victim it refuses every one with a larger key, so the manager stops at the
      first refusal.

    Policies are stateless; `name` is the name they are registered under.
    """

    name: ClassVar[str]

    @abstractmethod
    def key(self, hint: UsageHint) -> float:
        """Eviction priority: smaller goes first."""

    @abstractmethod
    def may_displace(self, victim: UsageHint, loader: UsageHint) -> bool:
        """Whether a background load for `loader` may evict `victim`."""
