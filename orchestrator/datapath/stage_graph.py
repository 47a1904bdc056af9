"""Which stage feeds which: the graph a pipeline's turns and user inputs are routed along."""

from __future__ import annotations

from dataclasses import dataclass

from stages.kinds import CONSUMES, PRODUCES, Payload, StageKind, carried
from stages.validation import require_positive_ints


@dataclass(frozen=True)
class ChunkSizes:
    """An edge forwards `first_chunk` items at once, then `chunk` at a time (a small first chunk
    for early audio, then steady ones). With `ramp`, each chunk after the first is twice the one
    before until it reaches `chunk` (4, 8, 16, 16, ...), so the audio a small first chunk bought
    covers the time the next chunk takes to fill."""

    first_chunk: int = 1
    chunk: int = 1
    ramp: bool = False

    def __post_init__(self) -> None:
        require_positive_ints(self, "first_chunk", "chunk")
        if not isinstance(self.ramp, bool):
            raise ValueError(f"ramp must be true or false, got {self.ramp!r}")

    def size(self, index: int) -> int:
        """Items in the chunk released `index`-th (0: the first)."""
        if index == 0:
            return self.first_chunk
        return min(self.chunk, self.first_chunk << index) if self.ramp else self.chunk


@dataclass(frozen=True)
class Edge:
    """Stage `source` feeds stage `target` what it produces (`carries`), in `chunks`."""

    source: StageKind
    target: StageKind
    chunks: ChunkSizes = ChunkSizes()

    @property
    def carries(self) -> Payload | None:
        """None: the source gives nothing the target takes (a StageGraph refuses such an edge)."""
        return carried(self.source, self.target)

    def __str__(self) -> str:
        return f"{self.source} -> {self.target}"


@dataclass(frozen=True)
class StageGraph:
    """A chain of stages through the thinker (the session's resident context).

    Contract, checked at construction (ValueError naming the edge): every edge carries what its
    source produces and its target takes; the thinker is in the graph; every stage feeds at most
    one stage and is fed by at most one, and no stage feeds itself back. So the graph is an input
    path into the thinker (the user's audio through an encoder, or an ASR stage's text; none: text
    only), the thinker, and a reply path out of it that ends in audio (none: replies are text only):
    hidden states to a talker, or text to a TTS stage.
    """

    edges: tuple[Edge, ...]

    def __post_init__(self) -> None:
        for edge in self.edges:
            if edge.carries is None:
                raise ValueError(f"edge {edge}: {edge.source} gives {_names(PRODUCES[edge.source])}, "
                                 f"{edge.target} takes {_names(CONSUMES[edge.target])}")
        for end, name in (("source", "feeds"), ("target", "is fed by")):
            ends = [getattr(edge, end) for edge in self.edges]
            for kind in set(ends):
                if ends.count(kind) > 1:
                    raise ValueError(f"{kind} {name} more than one stage; a pipeline is a chain")
        path = self.kinds
        if len(path) != len(set(path)) or len(self.edges) != len(path) - 1:
            raise ValueError(f"the edges {', '.join(map(str, self.edges))} do not make one chain through the thinker")
        if self.reply_path and Payload.PCM not in PRODUCES[self.reply_path[-1].target]:
            raise ValueError(f"the reply path ends at {self.reply_path[-1].target}, which makes no audio")

    @classmethod
    def omni(cls, thinker_to_talker: ChunkSizes = ChunkSizes(1, 1),
             talker_to_vocoder: ChunkSizes = ChunkSizes(4, 16)) -> StageGraph:
        """encoder -> thinker -> talker -> vocoder (Qwen3-Omni's shape)."""
        return cls((Edge(StageKind.ENCODER, StageKind.THINKER),
                    Edge(StageKind.THINKER, StageKind.TALKER, thinker_to_talker),
                    Edge(StageKind.TALKER, StageKind.VOCODER, talker_to_vocoder)))

    def _from(self, kind: StageKind) -> Edge | None:
        return next((edge for edge in self.edges if edge.source == kind), None)

    def _into(self, kind: StageKind) -> Edge | None:
        return next((edge for edge in self.edges if edge.target == kind), None)

    @property
    def input_path(self) -> tuple[StageKind, ...]:
        """The stages before the thinker, in order."""
        path, kind = [], StageKind.THINKER
        while (edge := self._into(kind)) is not None and len(path) <= len(self.edges):
            kind = edge.source
            path.insert(0, kind)
        return tuple(path)

    @property
    def reply_path(self) -> tuple[Edge, ...]:
        """The edges from the thinker to the audio, in order."""
        path, kind = [], StageKind.THINKER
        while (edge := self._from(kind)) is not None and len(path) <= len(self.edges):
            path.append(edge)
            kind = edge.target
        return tuple(path)

    @property
    def kinds(self) -> tuple[StageKind, ...]:
        """Every stage of the graph, in the order a spoken turn goes through them."""
        return (*self.input_path, StageKind.THINKER, *(edge.target for edge in self.reply_path))

    @property
    def hears(self) -> bool:
        """The user's audio reaches the thinker (through an encoder, or as text through an ASR stage)."""
        return bool(self.input_path)

    @property
    def speaks(self) -> bool:
        """Replies become audio."""
        return bool(self.reply_path)

    def edge(self, source: StageKind, target: StageKind) -> Edge:
        edge = self._from(source)
        if edge is None or edge.target != target:
            raise KeyError(f"no edge {source} -> {target} in the graph")
        return edge


def _names(payloads: tuple[Payload, ...]) -> str:
    return " or ".join(payloads)
