"""Where a stage's replicas compute, and the node they are planned on (built by `liveserve` from YAML)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from stages.validation import require_number, require_positive_ints

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "float8": 1}
CPU_DTYPE = "float32"  # what this build's runners compute in
GPU_FORMAT = re.compile(r"(\d+)x(\d+(?:\.\d+)?)GB")


@dataclass(frozen=True)
class StageDeployment:
    """How one stage is deployed: `replicas` engines, each on `devices`.

    `devices`: None (the CPU, where this build's runners compute), a number of GPUs per replica that
    the plan assigns (whole GPUs nobody else has), or one tuple of GPU indices per replica. On GPUs,
    `tensor_parallel_size` (None: the replica's GPUs) spans each replica's GPUs, `memory_fraction`
    (None: the whole GPU) is the share of each of its GPUs a replica may use, required wherever
    replicas share a GPU, and `dtype` sizes weights and KV (bytes per element).
    """

    stage: str
    replicas: int = 1
    devices: int | tuple[tuple[int, ...], ...] | None = None
    tensor_parallel_size: int | None = None
    memory_fraction: float | None = None
    dtype: str = "bfloat16"

    def __post_init__(self) -> None:
        require_positive_ints(self, "replicas")
        if self.dtype not in DTYPE_BYTES:
            raise ValueError(f"dtype must be one of {tuple(DTYPE_BYTES)}, got {self.dtype!r}")
        if self.memory_fraction is not None:
            require_number(self, "memory_fraction", lambda v: 0 < v <= 1, "a number in (0, 1]")
        if self.tensor_parallel_size is not None:
            require_positive_ints(self, "tensor_parallel_size")
        if self.devices is None:
            return
        if isinstance(self.devices, int):
            require_positive_ints(self, "devices")
        else:
            self._check_device_lists()
        if self.tensor_parallel_size not in (None, self.gpus_per_replica):
            raise ValueError(f"tensor_parallel_size {self.tensor_parallel_size} must equal each replica's GPUs "
                             f"({self.gpus_per_replica}, from devices): tensor parallelism spans a replica")

    def _check_device_lists(self) -> None:
        lists = self.devices
        if len(lists) != self.replicas:
            raise ValueError(f"devices lists the GPUs of {len(lists)} replicas, replicas is {self.replicas}")
        for index, gpus in enumerate(lists):
            if not gpus or any(gpu < 0 for gpu in gpus) or len(set(gpus)) != len(gpus):
                raise ValueError(f"devices[{index}] must be distinct GPU indices >= 0, got {list(gpus)}")
            if len(gpus) != len(lists[0]):
                raise ValueError(f"devices[{index}] has {len(gpus)} GPUs, devices[0] {len(lists[0])}: "
                                 "every replica of a stage takes as many")

    @property
    def on_gpus(self) -> bool:
        return self.devices is not None

    @property
    def gpus_per_replica(self) -> int:
        if self.devices is None:
            return 0
        return self.devices if isinstance(self.devices, int) else len(self.devices[0])

    @property
    def element_bytes(self) -> int:
        """Bytes per weight and KV element where the replicas compute."""
        return DTYPE_BYTES[self.dtype if self.on_gpus else CPU_DTYPE]


@dataclass(frozen=True)
class GPUNode:
    """One node's GPUs: `num_gpus` of `memory_gb` (10^9 bytes) each; written `8x141GB`."""

    num_gpus: int
    memory_gb: float

    def __post_init__(self) -> None:
        if isinstance(self.num_gpus, bool) or not isinstance(self.num_gpus, int) or self.num_gpus < 0:
            raise ValueError(f"num_gpus must be an integer >= 0, got {self.num_gpus!r}")
        require_number(self, "memory_gb", lambda v: v > 0, "a number of GB > 0")

    @classmethod
    def parse(cls, text: str) -> GPUNode:
        match = GPU_FORMAT.fullmatch(text.strip())
        if match is None:
            raise ValueError(f"expected COUNTxSIZEGB, e.g. 8x141GB, got {text!r}")
        return cls(int(match[1]), float(match[2]))

    @property
    def memory_bytes(self) -> float:
        return self.memory_gb * 1e9

    def __str__(self) -> str:
        return f"{self.num_gpus}x{self.memory_gb:g}GB"


NO_GPUS = GPUNode(0, 1.0)
