"""A SharedDevice board in named shared memory: what another process (as a Ray actor on the server's node)
attached by name reports, the stages here read."""

from __future__ import annotations

import pickle
import subprocess
import sys

from orchestrator.placement.shared_slots import SharedSlots
from stages.shared_device import SharedDevice

REPORT_IN_ANOTHER_PROCESS = """
import pickle, sys
from stages.shared_device import SharedDevice
talker = SharedDevice(pickle.loads(bytes.fromhex(sys.argv[1])), 1)
talker.report(talker.join(), True, True)  # a listener waits for first audio, and its KV is past its share
"""


def test_a_board_pickled_to_another_process_shares_its_slots_by_name():
    created = SharedSlots.create(2)
    try:
        thinker = SharedDevice(created, 0)
        assert thinker.join() == 0 and not thinker.listener_waiting and not thinker.kv_pressed
        subprocess.run([sys.executable, "-c", REPORT_IN_ANOTHER_PROCESS, pickle.dumps(created).hex()], check=True)
        assert thinker.listener_waiting and thinker.kv_pressed  # the other process is gone; the board it wrote stays
    finally:
        created.close()
