"""Instructions per `/v2` request, counted by callgrind: a cost that does not drift with the shared machine's load.

`python -m bench.instructions [--model simple] [--callers 64] [--encoding json] [--inline measured]` runs
`bench.request_profile` (the engine's `V2App` in process, no sockets) under `valgrind --tool=callgrind` twice, for
`--small` and `--large` requests, and prints the difference of their instruction totals divided by the difference of
their requests: start-up, model loading and warm-up cancel out. Kernel work (system calls, waking threads) is not
counted, and callgrind runs threads one at a time, so compare changes that alter what Python does per request.
`--top N` also lists the N C functions with the most instructions of their own a request (the same difference,
per function, from callgrind_annotate) and the share of the cyclic garbage collector (`gc_collect_main` and what it
calls), which Python-level profilers do not show.
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
_FUNCTION_LINE = re.compile(r"^\s*([\d,]+) \([^)]*\)\s+(\S.*?)(?: \[.*\])?$")
_GC_ENTRY = "gcmodule.c:gc_collect_main"


def functions(out: Path, inclusive: bool = False) -> dict[str, int]:
    """Instructions by C function (`file:function`) in one callgrind output, own or inclusive."""
    done = subprocess.run(
        ["callgrind_annotate", f"--inclusive={'yes' if inclusive else 'no'}", "--threshold=100", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    counts: dict[str, int] = {}
    for line in done.stdout.splitlines():
        match = _FUNCTION_LINE.match(line)
        if match and ":" in match.group(2) and "PROGRAM TOTALS" not in line:
            # the file's name, not the build's path; a recursive call's `'2` counts with its function
            name = re.sub(r"'\d+$", "", match.group(2).rsplit("/", 1)[-1])
            counts[name] = counts.get(name, 0) + int(match.group(1).replace(",", ""))
    return counts


def top_functions(small: Path, large: Path, requests: int, top: int) -> tuple[list[tuple[str, float]], float]:
    """The `top` C functions by own instructions a request, and the collector's instructions a request."""
    before, after = functions(small), functions(large)
    grown = sorted(((name, (after[name] - before.get(name, 0)) / requests) for name in after), key=lambda x: -x[1])
    gc_before, gc_after = functions(small, inclusive=True), functions(large, inclusive=True)
    collector = (gc_after.get(_GC_ENTRY, 0) - gc_before.get(_GC_ENTRY, 0)) / requests
    return grown[:top], collector


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
    parser.add_argument("--top", type=int, default=0, help="list this many C functions by instructions a request")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="infera-callgrind-") as name:
        folder = Path(name)
        small, large = count(args, args.small, folder), count(args, args.large, folder)
        requests = args.large - args.small
        outs = [folder / f"callgrind.{n}.out" for n in (args.small, args.large)]
        ranked = top_functions(*outs, requests, args.top) if args.top else None
    per_request = (large - small) / requests
    print(
        f"{args.model} {args.encoding}, {args.callers} callers, inline {args.inline}: "
        f"{per_request:,.0f} instructions a request ({small:,} for {args.small}, {large:,} for {args.large})"
    )
    if ranked is not None:
        grown, collector = ranked
        print(f"garbage collector: {collector:,.0f} a request ({collector / per_request:.1%})\n")
        print("| C function | own instructions a request | share |\n| --- | --- | --- |")
        for name, own in grown:
            print(f"| `{name}` | {own:,.0f} | {own / per_request:.1%} |")


if __name__ == "__main__":
    main()
