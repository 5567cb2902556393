"""`triage probe HOST...`: ask the node agents on HOSTs to run their probes and print a host report."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any


def _csv(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be a positive number of seconds")
    return value


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "probe",
        help="run node-agent probes on hosts and print a host report",
        description="Ask the node agents on HOSTs (in parallel) to run their probes; unreachable agents are "
        "reported, not fatal.",
    )
    p.add_argument("hosts", nargs="+", metavar="HOST")
    p.add_argument("--agent-url", required=True, metavar="TEMPLATE",
                   help="agent URL, e.g. http://{host}:9477 (or one fixed URL)")
    p.add_argument("--agent-map", metavar="FILE", help="YAML file of host: url overriding the template")
    p.add_argument("--agent-allow", metavar="PATTERNS",
                   help="hosts that may be probed besides the map's: globs and CIDRs, comma separated "
                        "(default: env TRIAGE_AGENT_ALLOW)")
    p.add_argument("--agent-secret-file", required=True, metavar="F", help="file holding the shared HMAC secret")
    p.add_argument("--probes", type=_csv, metavar="a,b", help="probes to run (default: all)")
    p.add_argument("--deadline", type=_positive, default=3.0, metavar="S", help="per-host deadline in seconds (default 3)")
    p.add_argument("--job-id", help="the job under diagnosis (flags processes that are not the job's)")
    p.add_argument("--job-gpus", type=_csv, metavar="0,1", help="GPUs the job used on every host")
    p.add_argument("--since", type=_positive, metavar="SECONDS", help="time window: the last SECONDS")
    p.add_argument("--json", action="store_true", help='print {"probes": {host: report}}')
    p.add_argument("--verbose", "-v", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # imported here: every `triage` command registers this one, and TLS/HTTP cost ~40 ms to import
    from bot.probes.client import AgentDirectory, DirectoryError, probe_hosts
    from bot.probes.report import render
    from node_agent.auth import SecretFileError, load_secret

    try:
        directory = AgentDirectory.from_files(args.agent_url, args.agent_map, allow=args.agent_allow)
        secret = load_secret(args.agent_secret_file)
    except (DirectoryError, SecretFileError) as exc:
        print(f"triage probe: {exc}", file=sys.stderr)
        return 2
    job_gpus = None
    if args.job_gpus:
        job_gpus = [int(g) if g.isdigit() else g for g in args.job_gpus]
    now = time.time()
    reports = probe_hosts(
        directory, args.hosts, secret, probes=args.probes,
        window=None if args.since is None else (now - args.since, now + 60),
        job_id=args.job_id,
        job_gpus_by_host=None if job_gpus is None else {h: job_gpus for h in args.hosts},
        deadline_s=args.deadline,
    )
    if args.json:
        print(json.dumps({"probes": {h: r.to_dict() for h, r in reports.items()}}, indent=2))
    else:
        print(render(reports, args.verbose))
    return 0
