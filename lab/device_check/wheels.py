"""The wheels the GPU machine's image lacks, fetched here (`--fetch-wheels DIR`) and unpacked there (`--wheels DIR`).

The image has Python 3.12, torch, triton, transformers (with what it depends on: pyyaml, packaging, tokenizers,
huggingface-hub), numpy and safetensors. What the check and the servers it starts import beyond that: REQUIREMENTS,
at .venv's versions, with every dependency that is not in the image (the first device run, 2026-11-29, found
pydantic missing: the image has no FastAPI stack at all).
Stdlib only: this runs before the wheels are on the path.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

REQUIREMENTS = (
    "fastapi==0.165.0", "starlette==1.10.0", "opentelemetry-api==1.45.2",  # the Realtime server's app
    "pydantic==2.14.4", "pydantic-core==2.50.5", "annotated-types==0.8.0", "annotated-doc==0.0.7",
    "typing-inspection==0.4.5", "typing-extensions==4.16.0", "anyio==4.16.0", "idna==3.20",  # what FastAPI needs
    "uvicorn==0.54.0", "h11==0.16.0", "click==8.5.1", "websockets==16.1.1",  # serving it; the replay's connections
    "onnxruntime==1.32.0", "flatbuffers==25.12.19", "protobuf==6.33.6",  # each session's VAD (monitor/silero.py)
    "silero-vad==6.2.3",
    "llguidance==1.9.1",  # the native thinker's tool-call grammar (stages/grammar), imported by stages.factory
)
PYTHON_VERSION = "3.12"
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_28_x86_64", "manylinux_2_31_x86_64")
CARRY_LIMIT_MIB = 64  # what a device run carries of the working tree, wheels included


def fetch(folder: Path) -> int:
    """Download REQUIREMENTS (no dependencies: the image has them) as CPython 3.12 manylinux x86_64 wheels into
    `folder` with pip; print each wheel there and their total size. Returns pip's exit status."""
    platforms = [f"--platform={platform}" for platform in PLATFORMS]
    done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                           f"--python-version={PYTHON_VERSION}", "--implementation=cp", *platforms,
                           f"--dest={folder}", *REQUIREMENTS])
    if done.returncode != 0:
        return done.returncode
    wheels = sorted(folder.glob("*.whl"))
    for wheel in wheels:
        print(f"{wheel.stat().st_size / 2**20:8.1f} MiB  {wheel.name}")
    print(f"{sum(wheel.stat().st_size for wheel in wheels) / 2**20:8.1f} MiB in {len(wheels)} wheels in {folder} "
          f"(a device run carries at most {CARRY_LIMIT_MIB} MiB, the working tree included)")
    return 0


def unpack(folder: Path, site: Path) -> list[str]:
    """Unzip every wheel in `folder` into `site`, which then imports them as site-packages would (a wheel is a zip
    of its import tree; what its `.data/purelib` and `.data/platlib` hold goes there too; its scripts and
    headers do not). The wheels' names; ValueError if `folder` has none."""
    wheels = sorted(folder.glob("*.whl"))
    if not wheels:
        raise ValueError(f"--wheels: no *.whl in {folder} (fetch them with --fetch-wheels {folder})")
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            for member in archive.infolist():
                target = _import_path(member.filename)
                if target is not None and not member.is_dir():
                    (site / target).parent.mkdir(parents=True, exist_ok=True)
                    (site / target).write_bytes(archive.read(member))
    return [wheel.name for wheel in wheels]


def _import_path(name: str) -> str | None:
    """Where a wheel's member goes under the site folder (None: nowhere)."""
    top, _, rest = name.partition("/")
    if not top.endswith(".data"):
        return name
    scheme, _, path = rest.partition("/")
    return path if scheme in ("purelib", "platlib") else None
