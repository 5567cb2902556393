"""`triage` command line: one module per subcommand, each exposing register(subparsers)."""

from __future__ import annotations

import argparse
import importlib
import sys

from bot import __version__

# Subcommand modules, in the order `triage --help` lists them. Each defines
# register(subparsers) and sets a `func` default that takes the parsed args and returns an exit code.
SUBCOMMANDS = [
    "bot.cli.diagnose_cmd",
    "bot.cli.signatures_cmd",
    "bot.cli.probe_cmd",
    "bot.cli.serve_cmd",
    "bot.cli.completion_cmd",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="triage",
        description="Diagnose failed GPU training jobs from their logs (and, with agents, their hosts).",
    )
    parser.add_argument("--version", action="version", version=f"triage {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:  # a subcommand still being built must not break the others
            if exc.name != name:
                raise
            continue
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `triage diagnose ... | head` must not print a traceback
        return 0


if __name__ == "__main__":
    sys.exit(main())
