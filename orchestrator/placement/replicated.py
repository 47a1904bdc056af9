"""Several replicas of some stages, started by another placement and routed by a ReplicaSet each."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from orchestrator.placement.base import OutputSink, Placement, StageHandle
from orchestrator.placement.replica_set import ReplicaSet
from stages.interaction import InteractionView
from stages.stage_spec import StageSpec

STICKY_KINDS = ("thinker",)  # the stage holding each session's resident context


def replica_name(stage: str, replica: int) -> str:
    return f"{stage}-{replica}"


def replica_names(stage: str, replicas: int) -> list[str]:
    """The names a stage's replicas run under: the stage's own for one."""
    return [replica_name(stage, replica) for replica in range(replicas)] if replicas > 1 else [stage]


def replica_spec(spec: StageSpec, replica: int) -> StageSpec:
    """Replica `replica` of a stage: named `<stage>-<replica>`, tracing to a file of that name."""
    name = replica_name(spec.name, replica)
    trace = spec.trace_path.with_name(f"{name}.jsonl") if spec.trace_path is not None else None
    return replace(spec, name=name, trace_path=trace)


class ReplicatedPlacement(Placement):
    """Starts `replicas[stage]` engines of each stage named there (one of the others) through `inner`,
    and hands the orchestrator one ReplicaSet per replicated stage: a session's thinker requests stay on
    the replica chosen at its first, every other request goes to the least-loaded replica."""

    def __init__(self, inner: Placement, replicas: Mapping[str, int]) -> None:
        self.inner, self.replicas = inner, dict(replicas)
        self.sets: dict[str, ReplicaSet] = {}

    def start(self, specs: tuple[StageSpec, ...], sink: OutputSink, clock: Callable[[], float],
              view: InteractionView | None = None) -> dict[str, StageHandle]:
        handles = self.inner.start(self.expand(specs), self._sink(sink), clock, view)
        out = {}
        for spec in specs:
            if self._count(spec) == 1:
                out[spec.name] = handles[spec.name]
                continue
            members = [handles[replica_spec(spec, index).name] for index in range(self._count(spec))]
            out[spec.name] = self.sets[spec.name] = ReplicaSet(spec.name, members, spec.kind in STICKY_KINDS)
        return out

    def expand(self, specs: tuple[StageSpec, ...]) -> tuple[StageSpec, ...]:
        """Every replica's spec, as `inner` starts them: `<stage>-<i>` of a stage of several, the stage's own of one."""
        return tuple(replica_spec(spec, index) if self._count(spec) > 1 else spec
                     for spec in specs for index in range(self._count(spec)))

    def _count(self, spec: StageSpec) -> int:
        return self.replicas.get(spec.name, 1)

    def _sink(self, sink: OutputSink) -> OutputSink:
        def track_then_sink(kind: str, outputs) -> None:
            replica_set = self.sets.get(kind)
            if replica_set is not None:
                replica_set.track_outputs(outputs)
            sink(kind, outputs)
        return track_then_sink

    def stop(self) -> None:
        self.inner.stop()
