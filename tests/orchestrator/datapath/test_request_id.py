"""Request ids are made in one place and keep their parts, across the stage processes' pipes too."""

from __future__ import annotations

import pickle

from orchestrator.datapath.request_id import RequestId


def test_a_request_id_is_its_string_and_keeps_its_parts_through_a_pipe():
    rid = RequestId("sess_1", "talker", 3)
    assert rid == "sess_1/talker#3" and hash(rid) == hash("sess_1/talker#3")  # a plain key to the stages
    back = pickle.loads(pickle.dumps(rid))
    assert back == rid and (back.session, back.role, back.generation) == ("sess_1", "talker", 3)
    assert {rid: 1}["sess_1/talker#3"] == 1
