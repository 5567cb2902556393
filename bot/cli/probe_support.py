"""`triage diagnose --probe`: build the agent directory from the CLI flags and fuse the answers."""

from __future__ import annotations

import argparse
from pathlib import Path

from bot.engine.model import Report

DEFAULT_TEMPLATE = "http://{host}:9477"


def read_secret(path: str) -> bytes:
    try:
        secret = Path(path).read_bytes().strip()
    except OSError as exc:
        raise ValueError(f"cannot read the agent secret file {path}: {exc.strerror or exc}") from exc
    if not secret:
        raise ValueError(f"the agent secret file {path} is empty")
    return secret


def probe_and_fuse(report: Report, args: argparse.Namespace) -> Report:
    if not args.agent_url and not args.agent_map:
        raise ValueError("--probe needs --agent-url TEMPLATE (e.g. http://{host}:9477) or --agent-map FILE")
    if not args.agent_secret_file:
        raise ValueError("--probe needs --agent-secret-file FILE")
    from bot.probes.client import AgentDirectory
    from bot.probing import probe_and_fuse as fuse_with_agents

    # with only a map, hosts missing from it fall back to the agents' default port
    directory = AgentDirectory.from_files(args.agent_url or DEFAULT_TEMPLATE, args.agent_map,
                                          allow=args.agent_allow)
    return fuse_with_agents(report, directory, read_secret(args.agent_secret_file), deadline_s=args.probe_deadline)
