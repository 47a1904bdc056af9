"""The order behind the next-use CachePolicy for vLLM's KV offload (stages/vllm_backend/next_use_order.py), in
pure Python; the same policy inside vLLM's own offloading manager and scheduler: test_vllm_cache_policy.py."""

from __future__ import annotations

import pytest

from stages.vllm_backend.next_use_order import NextUseOrder


def stored(order: NextUseOrder, session: str | None, *keys: str) -> None:
    """One request's keys (head first) bound to `session`, stored and evictable, as vLLM's manager does it."""
    order.used(list(keys), session)
    for key in keys:
        order.add(key, f"chunk {key}", evictable=True)
    order.used(list(keys), session)  # the request's end: its keys in prefix order


def three_sessions(next_use: dict[str, float]) -> NextUseOrder:
    order = NextUseOrder(next_use.get)
    for session in ("a", "b", "c"):  # a least recently used
        stored(order, session, f"{session}0", f"{session}1")
    return order


def test_the_farthest_sessions_chunks_go_first_tail_before_head():
    order = three_sessions({"a": 30.0, "b": 90.0, "c": 60.0})
    assert order.victims(3, protected=set()) == ["b1", "b0", "c1"]


def test_without_next_use_times_or_sessions_the_order_is_lru():
    assert three_sessions({}).victims(3, protected=set()) == ["a1", "a0", "b1"]
    order = NextUseOrder({"a": 1.0}.get)
    stored(order, None, "x0", "x1")
    stored(order, None, "y0")
    order.used(["x0", "x1"], None)  # x is used again: y is now least recently used
    assert order.victims(3, protected=set()) == ["y0", "x1", "x0"]


def test_equal_next_uses_fall_back_to_lru_and_an_unknown_one_counts_as_farthest():
    assert three_sessions({"a": 50.0, "b": 50.0, "c": 10.0}).victims(3, protected=set()) == ["a1", "a0", "b1"]
    assert three_sessions({"a": 50.0, "c": 10.0}).victims(2, protected=set()) == ["b1", "b0"]


def test_a_chunk_shared_by_sessions_counts_the_soonest_next_use():
    order = three_sessions({"a": 90.0, "b": 60.0, "c": 30.0})
    order.used(["a0"], "c")  # c's request reused a's head (a shared prefix)
    assert order.victims(2, protected=set()) == ["a1", "b1"]


def test_eviction_is_exactly_n_unprotected_evictable_keys_or_nothing():
    order = three_sessions({"a": 30.0, "b": 90.0, "c": 60.0})
    order.set_evictable("c1", False)  # a load reads it
    assert order.victims(3, protected={"b0"}) == ["b1", "c0", "a1"]
    assert order.victims(5, protected={"b0"}) is None
    assert len(order.chunks) == 6 and len(order.evictable) == 5
    order.check_integrity()


def test_popped_keys_lose_their_sessions_and_bindings_of_keys_never_stored_are_dropped():
    order = three_sessions({})
    assert order.pop("a0") == "chunk a0" and "a0" not in order.sessions
    for i in range(200):
        order.used([f"miss{i}"], "d")  # stores that never came (no room)
    assert len(order.sessions) <= 2 * 64 + 1
    assert {"a1", "b0", "b1", "c0", "c1"} <= order.sessions.keys()
    order.check_integrity()


@pytest.mark.parametrize("n", [0, 1])
def test_asking_for_no_more_than_there_are(n):
    order = NextUseOrder()
    stored(order, "a", "a0")
    assert order.victims(n, protected=set()) == ["a0"][:n]
