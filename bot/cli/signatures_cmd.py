"""`triage signatures lint|test|list`: check the library the way CI does."""

from __future__ import annotations

import argparse
import sys
import time

from bot.engine.backends import BACKENDS
from bot.engine.library import load_library
from bot.engine.lint import lint, run_tests, taxonomy_ids


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("signatures", help="lint, test or list the signature library")
    ssub = p.add_subparsers(dest="sig_command", metavar="ACTION", required=True)
    for name, helptext in (("lint", "schema and meaning checks; every problem with its file"),
                           ("test", "run every signature's match / no_match lines through the engine"),
                           ("list", "one line per signature")):
        sp = ssub.add_parser(name, help=helptext)
        sp.add_argument("--dir", metavar="DIR", help="library folder (default: the packaged one)")
        if name == "test":
            sp.add_argument("ids", nargs="*", help="only these signature ids")
            sp.add_argument("--matcher", choices=BACKENDS)
        sp.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    t0 = time.monotonic()
    lib = load_library(args.dir)
    if args.sig_command == "list":
        for sig in sorted(lib.signatures.values(), key=lambda s: (s.family, s.id)):
            flag = " (downstream)" if sig.downstream else ""
            print(f"{sig.family:14s} {sig.id:36s} {sig.title}{flag}")
        return 0
    if args.sig_command == "lint":
        problems = lint(lib, taxonomy_ids())
        for prob in problems:
            print(prob)
        n = len(lib.signatures)
        print(f"{n} signatures, {len(lib.patterns)} patterns, {len(problems)} problem(s) "
              f"({time.monotonic() - t0:.2f}s)", file=sys.stderr)
        return 1 if problems else 0
    for prob in lib.problems:
        print(prob)
    count, failures = run_tests(lib, set(args.ids) or None, backend=args.matcher)
    for f in failures:
        print(f)
    print(f"{count} signature test line(s), {len(failures)} failure(s)", file=sys.stderr)
    return 1 if failures or lib.problems else 0
