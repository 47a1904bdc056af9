"""The device board's memory is one for every stage process, also one of another interpreter: a process started
with subprocess (not by multiprocessing), given the board down its socket, sees what this process reports and
reports what this process sees."""

from __future__ import annotations

import socket
import subprocess
import sys
from multiprocessing.connection import Connection
from pathlib import Path

from orchestrator.device_board import DeviceBoardMemory, receive_slots
from stages.shared_device import SharedDevice

ROOT = Path(__file__).resolve().parents[2]
CHILD = """
import sys
from multiprocessing.connection import Connection
from orchestrator.device_board import receive_slots
from stages.shared_device import SharedDevice
device = SharedDevice(receive_slots(Connection(int(sys.argv[1])), 3), first_slot=2)
print(device.listener_waiting, flush=True)   # what the other process reported
device.report(device.join(), True)           # slot 2: a listener waits here
"""


def mapped_here(board: DeviceBoardMemory) -> memoryview:
    mine, theirs = socket.socketpair()
    with mine, theirs:
        board.send(Connection(mine.detach()), 0)
        return receive_slots(Connection(theirs.detach()), board.num_slots)


def test_a_process_of_another_interpreter_shares_the_board():
    board = DeviceBoardMemory(3)
    here = SharedDevice(mapped_here(board))
    assert here.join() == 0 and not here.listener_waiting  # a new board: nobody waits
    here.report(0, True)
    parent_end, child_end = socket.socketpair()
    with child_end:
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(child_end.fileno())], pass_fds=(child_end.fileno(),),
                                 cwd=ROOT, stdout=subprocess.PIPE, text=True)
    connection = Connection(parent_end.detach())
    board.send(connection, child.pid)
    board.close()  # the mappings keep the memory
    out, _ = child.communicate(timeout=60)
    connection.close()
    assert child.returncode == 0
    assert out.strip() == "True"  # the child saw slot 0's report
    here.report(0, False)
    assert here.listener_waiting  # slot 2, the child's, still says a listener waits
