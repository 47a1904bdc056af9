"""`python -m orchestrator.placement.stage_process_main FD`: a stage process in an interpreter of its own (see
interpreter_process): its StageProcessArgs come first over the socket FD, then it serves as any stage process."""

from __future__ import annotations

import sys
from multiprocessing.connection import Connection

from orchestrator.placement.stage_process import serve_stage
from orchestrator.placement.wire import Channel


def main(fd: int) -> None:
    connection = Connection(fd)
    serve_stage(Channel(connection).recv(), connection)


if __name__ == "__main__":
    main(int(sys.argv[1]))
