"""A stage bus whose stages only record the commands they get: a reply strategy driven by hand."""

from __future__ import annotations

from orchestrator.datapath.stage_bus import StageBus
from stages.commands import AddRequest, AppendInput


class RecordingStage:
    def __init__(self) -> None:
        self.commands: list = []

    def submit(self, command) -> None:
        self.commands.append(command)

    def added(self) -> list:
        return [c.request for c in self.commands if isinstance(c, AddRequest)]

    def appended(self) -> list:
        return [c.data for c in self.commands if isinstance(c, AppendInput)]


def recording_bus(*kinds: str) -> StageBus:
    bus = StageBus(placement=None, clock=lambda: 5.0)
    bus.stages = {kind: RecordingStage() for kind in kinds}
    return bus
