"""Instructions per `/v2` request, counted by callgrind: a cost that does not drift with the shared machine's load.

`python -m bench.instructions [--model simple] [--callers 64] [--encoding json] [--inline measured]` runs
`bench.request_profile` (the engine's `V2App` in process, no sockets) under `valgrind --tool=callgrind` twice, for
`--small` and `--large` requests, and prints the difference of their instruction totals divided by the difference of
their requests: start-up, model loading and warm-up cancel out. Kernel work (system calls, waking threads) is not
counted, and callgrind runs threads one at a time, so compare changes that alter what Python does per request.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.servers import ROOT

_TOTALS = re.compile(r"^(?:summary|totals):\s+(\d+)", re.MULTILINE)


def count(args: argparse.Namespace, requests: int, folder: Path) -> int:
    """The instructions callgrind counted over a whole run that answers `requests` requests."""
    out = folder / f"callgrind.{requests}.out"
    command = [
        "valgrind",
        "--tool=callgrind",
        f"--callgrind-out-file={out}",
        sys.executable,
        "-m",
        "bench.request_profile",
        "--no-profile",
        "--model",
        args.model,
        "--encoding",
        args.encoding,
        "--callers",
        str(args.callers),
        "--inline",
        args.inline,
        "--requests",
        str(requests),
    ]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"callgrind run failed ({done.returncode}): {done.stderr[-1500:]}")
    match = _TOTALS.search(out.read_text(errors="replace"))
    if match is None:
        raise RuntimeError(f"no instruction total in {out}")
    return int(match.group(1))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.instructions", description=__doc__)
    parser.add_argument("--model", default="simple")
    parser.add_argument("--encoding", default="json", choices=["json", "binary"])
    parser.add_argument("--callers", type=int, default=64)
    parser.add_argument("--inline", choices=["measured", "always", "never"], default="measured")
    parser.add_argument("--small", type=int, default=500, help="requests of the shorter run")
    parser.add_argument("--large", type=int, default=2500, help="requests of the longer run")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="infera-callgrind-") as name:
        folder = Path(name)
        small, large = count(args, args.small, folder), count(args, args.large, folder)
    per_request = (large - small) / (args.large - args.small)
    print(
        f"{args.model} {args.encoding}, {args.callers} callers, inline {args.inline}: "
        f"{per_request:,.0f} instructions a request ({small:,} for {args.small}, {large:,} for {args.large})"
    )


if __name__ == "__main__":
    main()
