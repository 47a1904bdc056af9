"""Scheduling policies: which ready requests a stage serves each round, in what order."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

from kvtier.registry import Registry
from stages.requests.base import RequestStatus

if TYPE_CHECKING:
    from stages.config import SchedulerConfig
    from stages.interaction import InteractionView
    from stages.shared_device import SharedDevice


class PolicyKV(Protocol):
    """What a policy reads of its stage's KV: the pool's size in blocks and the positions a block holds, the
    share of it in use, the blocks whose KV is offloaded (what the device would take back), and the device
    blocks a request holds (0 for one it does not know). A KVCacheManager is one; so is vLLM's block pool seen
    from its scheduler."""

    block_size: int

    @property
    def num_blocks(self) -> int: ...

    @property
    def num_used_blocks(self) -> int: ...

    @property
    def occupancy(self) -> float: ...

    @property
    def num_offloaded_blocks_total(self) -> int: ...

    def num_blocks_held(self, request_id: str) -> int: ...


class Orderable(Protocol):
    """What a policy reads of a request it orders. A StageRequest is one; so is another engine's request
    (vLLM's) described by LiveServe's request id, the key of the stage's InteractionView. `audio_ms` is the
    reply audio its outputs carried so far (0 at a stage whose outputs are not audio)."""

    @property
    def request_id(self) -> str: ...

    @property
    def status(self) -> RequestStatus: ...

    @property
    def arrival_time(self) -> float: ...

    @property
    def ready_since(self) -> float | None: ...

    @property
    def is_speculative(self) -> bool: ...

    @property
    def num_pending(self) -> int: ...

    @property
    def audio_ms(self) -> float: ...


R = TypeVar("R", bound=Orderable)


class SchedulingPolicy(ABC):
    """Chooses, every round, which ready requests one stage serves and in what order.

    A policy is built once per scheduler with its `params` (an instance of the frozen
    params class it is registered with in SCHEDULING_POLICIES) and what it may consult:
    the stage's `InteractionView` (None: no playback telemetry), its KV (`PolicyKV`)
    (None: a stage without KV) and the `SharedDevice` board of the stages computing on
    its device (None: it shares the device with no one).

    Contract:
    - `order(requests, now)` gets the requests with pending work (Orderable: the stage's
      StageRequests, or vLLM's requests at a thinker on vLLM), each with
      `ready_since` set, and returns the ones to serve this round, most urgent
      first, each at most once, without mutating any. The scheduler admits in
      exactly this order while its budgets last, and preempts from the end of it.
      It is called every round, with no requests when none is ready.
    - A request left out is *held*: it is not served this round, keeps its state
      (an admitted one keeps its KV, though it is the first active request to lose
      it under preemption) and is offered again next round. A policy may hold every
      request it is given (work far ahead of its listener, or a device left to another
      stage's waiting listener); the engine then looks again a few ms later.
    - `resume_at` maps requests the last `order` held for a while (far ahead of
      their listener, not just left out for a round) to the clock time each is
      expected to be served again; their KV may leave the device meanwhile. Empty
      for a policy that holds nothing that long.
    - `prefill_patience_s`: how long an admitted prefill never preempted, from its
      `ready_since`, waits for the decoders to end before it may make an active request
      recompute; a recomputation waits while any decodes (0: neither waits; see Preemptor).
    - `reserves_decode_budget`: whether a prefill chunk leaves a token of the round's
      budget for each admitted request decoding after it in the order (see BatchPlanner);
      a policy that orders new turns before replies playing sets it.
    - `prefill_cap`: set by `order` for its round: at most how many positions the round's
      chunks of more than one position (prefills) take in all (None: the round's budget).
      A round's time grows with its prefill, and a reply playing gets its next position
      only when the round ends.
    - `order` runs on the engine thread every round that has ready work: keep it cheap.
    - `counters` are cumulative ints, cheap to read from any thread (possibly a
      round stale); their names are the policy's own, read this way by exporters:
      `rounds` counts rounds ordered, any other name the ready requests put in that
      class, summed over rounds.
    """

    prefill_patience_s = 0.0
    reserves_decode_budget = False
    prefill_cap: int | None = None

    def __init__(self, params: object, view: InteractionView | None = None,
                 kv: PolicyKV | None = None, device: SharedDevice | None = None) -> None:
        self.params = params
        self.view = view
        self.kv = kv
        self.device = device
        self.resume_at: dict[str, float] = {}

    @abstractmethod
    def order(self, requests: Sequence[R], now: float) -> list[R]:
        """The requests to serve this round, most urgent first; the rest are held."""

    @property
    def counters(self) -> dict[str, int]:
        return {}


SCHEDULING_POLICIES: Registry[SchedulingPolicy] = Registry("scheduling policy")  # factories: (params, view, kv, device)
SCHEDULING_POLICIES.add("fcfs", "stages.policies.fcfs:FCFSPolicy", params="stages.policies.fcfs:FCFSParams")
SCHEDULING_POLICIES.add("urgency", "stages.policies.urgency:UrgencyPolicy",
                        params="stages.policies.urgency:UrgencyParams")


def make_policy(config: SchedulerConfig, view: InteractionView | None = None,
                kv: PolicyKV | None = None, device: SharedDevice | None = None) -> SchedulingPolicy:
    """The policy `config.policy` names, with `config.params` (None: its defaults), for a stage with this
    telemetry, KV and device. ValueError for an unknown name or params of another policy."""
    params_class = SCHEDULING_POLICIES.params(config.policy)
    params = params_class() if config.params is None else config.params
    if not isinstance(params, params_class):
        raise ValueError(f"scheduling policy {config.policy!r} takes {params_class.__name__}, "
                         f"got {type(params).__name__}")
    return SCHEDULING_POLICIES.make(config.policy, params, view, kv, device)
