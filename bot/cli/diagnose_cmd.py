"""`triage diagnose [--json] PATH... | -`: offline diagnosis, no Slack, no network (unless --probe)."""

from __future__ import annotations

import argparse
import json
import sys

from bot.engine import SourceError, diagnose_paths
from bot.engine.backends import BACKENDS
from bot.engine.library import default_library, load_library
from bot.engine.reader import DEFAULT_MAX_BYTES
from bot.engine.render import render_text
from bot.engine.run import ProgressPrinter
from bot.redact import redact_text


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "diagnose",
        help="diagnose log files, directories (one incident, a file per rank/host), .gz/.zst or stdin",
        description="Diagnose a failed GPU job from its logs. Exit status 0 whenever the input could be read.",
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="file, directory, .gz/.zst file, or - for stdin")
    p.add_argument("--json", action="store_true", help="print the machine-readable report")
    p.add_argument("--signatures", metavar="DIR", help="use another signature library folder")
    p.add_argument("--matcher", choices=BACKENDS,
                   help="force a scan backend (default: the fastest installed; env TRIAGE_MATCHER)")
    p.add_argument("--workers", type=int, help="scan processes (default: CPUs, at most 8)")
    p.add_argument("-v", "--verbose", action="store_true", help="show every probe result")
    p.add_argument("--probe", action="store_true", help="ask the node agents on the implicated hosts")
    p.add_argument("--agent-url", metavar="TEMPLATE", help="agent URL, e.g. http://{host}:9477")
    p.add_argument("--agent-map", metavar="FILE", help="YAML host: url overrides")
    p.add_argument("--agent-secret-file", metavar="FILE", help="shared secret for signing agent calls")
    p.add_argument("--agent-allow", metavar="PATTERNS",
                   help="hosts that may be probed besides the map's: globs and CIDRs, comma separated "
                        "(default: env TRIAGE_AGENT_ALLOW)")
    p.add_argument("--probe-deadline", type=float, default=3.0, metavar="S", help="per-host deadline (s)")
    p.add_argument("--no-redact", dest="redact", action="store_false",
                   help="print secrets found in the logs as they are (by default tokens, passwords and keys "
                        "in evidence lines and captures are shown as [REDACTED])")
    p.add_argument("--max-bytes", type=_size, default=DEFAULT_MAX_BYTES, metavar="N[KMG]",
                   help=f"read at most this much in all, after decompression (default {DEFAULT_MAX_BYTES >> 30}G)")
    p.set_defaults(func=run)


def _size(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    t = text.strip().lower().removesuffix("b").removesuffix("i")
    try:
        n = float(t[:-1]) * units[t[-1]] if t and t[-1] in units else float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 500M, 4G)") from None
    if n <= 0:
        raise argparse.ArgumentTypeError("the size must be positive")
    return int(n)


def run(args: argparse.Namespace) -> int:
    library = load_library(args.signatures) if args.signatures else default_library()
    for prob in library.problems:
        print(f"triage: signature library problem: {prob}", file=sys.stderr)
    progress = ProgressPrinter(sys.stderr)
    try:
        report = diagnose_paths(args.paths, library=library, backend=args.matcher, workers=args.workers,
                                progress=progress, max_bytes=args.max_bytes)
    except SourceError as exc:
        progress.finish()
        print(f"triage: {exc}", file=sys.stderr)
        return 2
    progress.finish()
    if args.probe:
        from bot.cli.probe_support import probe_and_fuse

        try:
            report = probe_and_fuse(report, args)
        except ValueError as exc:
            print(f"triage: {exc}", file=sys.stderr)
            return 2
    redacted = [0]
    if args.json:
        out: object = report.to_dict()
        if args.redact:
            out = _redact_deep(out, redacted)
        json.dump(out, sys.stdout, indent=1, default=str)
        sys.stdout.write("\n")
    else:
        text = render_text(report, verbose=args.verbose)
        if args.redact:
            # Line by line: an evidence line holding the start of a PEM block must not swallow the
            # rest of the report.
            text = "".join(_redact_line(line, redacted) for line in text.splitlines(keepends=True))
        sys.stdout.write(text)
    if redacted[0]:
        print(f"triage: {redacted[0]} secret(s) in the logs shown as [REDACTED] (--no-redact shows them)",
              file=sys.stderr)
    return 0


def _redact_line(line: str, counter: list[int]) -> str:
    red = redact_text(line)
    counter[0] += red.count
    return red.text


def _redact_deep(obj: object, counter: list[int]) -> object:
    """Every string of the JSON report redacted (the engine itself never redacts: this is the adapter)."""
    if isinstance(obj, str):
        return _redact_line(obj, counter)
    if isinstance(obj, dict):
        return {k: _redact_deep(v, counter) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_redact_deep(v, counter) for v in obj]
    return obj
