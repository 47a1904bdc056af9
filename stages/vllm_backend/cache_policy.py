"""LiveServe's next-use eviction as a vLLM `CachePolicy` (vllm 0.32's KV offload, `kv_offload/cpu/policies`):
the module vLLM's CachePolicyFactory loads by path (`cache_policy_module_path`), and the per-request hint
that names a request's session. It imports vLLM, so only the vLLM interpreter's stage process loads it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from vllm.v1.kv_hints import KvHintAction, KvHintsEnvelope
from vllm.v1.kv_offload.base import OffloadKey, ReqContext
from vllm.v1.kv_offload.cpu.policies.base import CachePolicy, ChunkStatus, order_request_keys

from stages.vllm_backend.next_use_order import NextUseOf, NextUseOrder

SESSION_ACTION = "liveserve.session"  # a KvHintAction of this type names the request's session in its payload
SESSION_ACTION_VERSION = "1"


def session_hints(session: str) -> KvHintsEnvelope:
    """The kv_hints a request of `session` (LiveServe's request id for the session's context) carries."""
    action = KvHintAction(action_id=session, action_type=SESSION_ACTION, action_version=SESSION_ACTION_VERSION,
                          payload={"session": session})
    return KvHintsEnvelope(protocol_version="1", message_id=session, actions=[action])


def session_of(req_context: ReqContext) -> str | None:
    """The session a request's hints name; None: no hints, or none of ours."""
    hints = req_context.kv_hints
    actions = hints.actions if hints is not None else ()
    return next((action.payload.get("session") for action in actions if action.action_type == SESSION_ACTION), None)


class NextUseCachePolicy(CachePolicy):
    """Evicts the offloaded chunks of the session needed farthest in the future (next_use_order.NextUseOrder).

    Contract, on top of vLLM's CachePolicy (which CPUOffloadingManager drives and whose atomic `evict` this
    keeps: exactly n chunks, or None and no change):
    - Sessions come through the per-request route: a request's `kv_hints` (`session_hints`) reach the policy
      in the ReqContext of `on_store_miss`, `touch` and `on_request_finished`, which bind the keys the request
      stores, loads or reuses to its session. A request without them binds nothing.
    - Next-use times come from `next_use_of` (session -> clock time, None: unknown), asked at eviction time:
      vLLM's hints are fixed when a request is added and `evict` gets no request context, while a session's
      next use moves after its request has ended (its reply plays on), so the owner of the engine sets
      `next_use_of` on this instance (vllm_api.evict_by_next_use). Unset, every next use is unknown.
    - Order: farthest next use first; a chunk shared by sessions counts the soonest; unknown (no session, or
      no time) is farthest; among equals least recently used first, a request's tail before its head (the
      head is what later prompts share). With no hints or no times this is LRU order.
    """

    def __init__(self, cache_capacity: int) -> None:
        super().__init__(cache_capacity)
        self.order = NextUseOrder()

    @property
    def next_use_of(self) -> NextUseOf:
        return self.order.next_use_of

    @next_use_of.setter
    def next_use_of(self, next_use_of: NextUseOf) -> None:
        self.order.next_use_of = next_use_of

    def get(self, key: OffloadKey) -> ChunkStatus | None:
        return self.order.chunks.get(key)

    def insert(self, key: OffloadKey, chunk: ChunkStatus) -> None:
        self.order.add(key, chunk, evictable=chunk.ref_cnt == 0)

    def remove(self, key: OffloadKey) -> None:
        self.order.pop(key)

    def touch(self, keys: Iterable[OffloadKey], req_context: ReqContext) -> None:
        self.order.used(list(keys), session_of(req_context))

    def on_request_finished(self, key_groups: Sequence[Sequence[OffloadKey]], insertion_only_keys: set[OffloadKey],
                            reused_keys: set[OffloadKey], req_context: ReqContext) -> None:
        self.order.used(order_request_keys(key_groups, req_context), session_of(req_context))

    def evict(self, n: int, protected: set[OffloadKey]) -> list[tuple[OffloadKey, ChunkStatus]] | None:
        victims = self.order.victims(n, protected)
        return None if victims is None else [(key, self.order.pop(key)) for key in victims]

    def clear(self) -> None:
        self.order = NextUseOrder(self.order.next_use_of)

    def mark_evictable(self, key: OffloadKey) -> None:
        self.order.set_evictable(key, True)

    def mark_non_evictable(self, key: OffloadKey) -> None:
        self.order.set_evictable(key, False)
