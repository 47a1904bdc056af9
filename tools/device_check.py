"""One prepared run on a CUDA machine that answers what only a GPU can: stage parity with the CPU, engine rates
against the cost model's roofline, the KV tier's link and preload overlap, and the policies' claim at equal load.

    python3 tools/device_check.py --fetch-wheels build/device_wheels      # here, where PyPI is reachable
    python3 tools/device_check.py --wheels build/device_wheels --out OUT  # there, from the repository's root
    python3 tools/device_check.py --dry-run --out OUT                     # every step at tiny size on the CPU

Writes OUT/device_check.json and OUT/device_check.md (lab/device_check: one module per section). The repository need
not be installed: its root goes on the path, and `--wheels` puts the wheels the GPU image lacks there too (see
lab/device_check/wheels.py). Sections that would not fit in what is left of `--budget-s` are skipped, saying so.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_BUDGET_S = 450.0
SECTIONS = ("parity", "engine", "kv_tier", "claim")  # lab.device_check.run.SHARES' order; stdlib only here


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="where device_check.json and device_check.md go")
    parser.add_argument("--dry-run", action="store_true", help="every step at tiny size on the CPU (no GPU needed)")
    parser.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S,
                        help=f"seconds the sections may take in all (default {DEFAULT_BUDGET_S:g})")
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"the sections to run, comma-separated "
                        f"(default: all of {','.join(SECTIONS)})")
    parser.add_argument("--wheels", type=Path, help="a folder of the wheels --fetch-wheels fetched, put on the path")
    parser.add_argument("--fetch-wheels", type=Path, metavar="DIR",
                        help="download the wheels the GPU image lacks into DIR, and do nothing else")
    args = parser.parse_args(argv)
    if args.fetch_wheels is None and args.out is None:
        parser.error("--out is required (or --fetch-wheels DIR)")
    if args.budget_s <= 0:
        parser.error(f"--budget-s must be > 0, got {args.budget_s:g}")
    args.only = tuple(args.only.split(","))
    if unknown := [name for name in args.only if name not in SECTIONS]:
        parser.error(f"--only: no section {', '.join(unknown)} (sections: {', '.join(SECTIONS)})")
    if args.wheels is not None and not any(args.wheels.glob("*.whl")):
        parser.error(f"--wheels: no *.whl in {args.wheels} (fetch them with --fetch-wheels {args.wheels})")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sys.path.insert(0, str(REPO))
    from lab.device_check import bootstrap, wheels

    if args.fetch_wheels is not None:
        args.fetch_wheels.mkdir(parents=True, exist_ok=True)
        return wheels.fetch(args.fetch_wheels)
    with bootstrap.prepared(REPO, args.wheels) as unpacked:
        if unpacked:
            print(f"on the path: {', '.join(unpacked)}", file=sys.stderr)
        return check(args)


def check(args: argparse.Namespace) -> int:
    import torch

    from lab.device_check.run import DRY_RUN, ON_GPU, run_check

    if not args.dry_run and not torch.cuda.is_available():
        print(f"error: torch {torch.__version__} sees no CUDA GPU here; --dry-run runs every step on the CPU",
              file=sys.stderr)
        return 2
    report = run_check(DRY_RUN if args.dry_run else ON_GPU, args.out.resolve(), args.budget_s, args.only)
    print(f"{args.out / 'device_check.md'}: {report['seconds']} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
