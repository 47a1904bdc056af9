"""RecentReplies keeps a session's latest replies' turns, and no more."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from orchestrator.interaction.recent_replies import RecentReplies


def test_each_reply_beyond_capacity_releases_the_oldest():
    replies = RecentReplies(capacity=2)
    turns = [SimpleNamespace(item_id=f"item{i}") for i in range(5)]
    for turn in turns:
        replies.add(turn)
        assert len(replies) <= 2  # bounded at every step, however long the session
    assert [replies.get(t.item_id) for t in turns] == [None, None, None, turns[3], turns[4]]


def test_unknown_items_have_no_turn_and_at_least_the_newest_is_kept():
    assert RecentReplies().get("item_of_the_client") is None and RecentReplies().get(None) is None
    with pytest.raises(ValueError):
        RecentReplies(capacity=0)
