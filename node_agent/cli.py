"""`node-agent serve` (the daemon), `node-agent probe` (run probes once, locally), `node-agent scenarios`."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
import time
from typing import Any

from node_agent import __version__
from node_agent.auth import SecretFileError, load_secret
from node_agent.config import AgentConfig, ConfigError, load_config
from node_agent.probes import PROBE_NAMES
from node_agent.request import ProbeRequest
from node_agent.simulate import ScenarioError, list_scenarios


def _fail(msg: str, code: int = 2) -> int:
    print(f"node-agent: {msg}", file=sys.stderr)
    return code


def _csv_ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _gpu_list(text: str) -> list[int | str]:
    return [int(x) if x.strip().isdigit() else x.strip() for x in text.split(",") if x.strip()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="node-agent", description="Read-only NVML and host probes for gpu-triage.")
    parser.add_argument("--version", action="version", version=f"node-agent {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve = sub.add_parser("serve", help="run the HTTP daemon")
    serve.add_argument("--listen", help="ADDR:PORT (default 0.0.0.0:9477; env NODE_AGENT_LISTEN)")
    serve.add_argument("--secret-file", help="file holding the shared HMAC secret (env NODE_AGENT_SECRET_FILE)")
    serve.add_argument("--simulate", metavar="SCENARIO", help="fake NVML + fixture host: a scenario name or JSON path")
    serve.add_argument("--config", help="JSON config file (env NODE_AGENT_CONFIG)")
    serve.add_argument("--name", help="host name to report (default: this host's name)")
    serve.add_argument("--log-level", help="DEBUG, INFO, WARNING (default INFO)")
    serve.add_argument("--log-format", choices=("text", "json"),
                       help="text (default) or json: one JSON object per line (env NODE_AGENT_LOG_FORMAT)")
    serve.add_argument("--tls-cert", metavar="PEM", help="serve HTTPS with this certificate (env NODE_AGENT_TLS_CERT)")
    serve.add_argument("--tls-key", metavar="PEM", help="its private key, if not in --tls-cert (env NODE_AGENT_TLS_KEY)")
    serve.add_argument("--tls-client-ca", metavar="PEM",
                       help="require client certificates issued by this CA (env NODE_AGENT_TLS_CLIENT_CA)")
    serve.set_defaults(func=cmd_serve)

    probe = sub.add_parser("probe", help="run probes once on this host and print the report")
    probe.add_argument("probes", nargs="*", metavar="PROBE", help=f"probes to run (default all: {', '.join(PROBE_NAMES)})")
    probe.add_argument("--simulate", metavar="SCENARIO")
    probe.add_argument("--config")
    probe.add_argument("--json", action="store_true", help="print the JSON answer")
    probe.add_argument("--gpus", type=_gpu_list, help="GPU indices or UUIDs, comma-separated")
    probe.add_argument("--job-id")
    probe.add_argument("--job-pids", type=_csv_ints, default=[])
    probe.add_argument("--job-gpus", type=_gpu_list)
    probe.add_argument("--since", type=float, metavar="SECONDS", help="time window: the last SECONDS (default 24 h)")
    probe.add_argument("--timeout", type=float, default=None, help="answer budget in seconds")
    probe.add_argument("--verbose", "-v", action="store_true")
    probe.set_defaults(func=cmd_probe)

    scen = sub.add_parser("scenarios", help="list the simulation scenarios")
    scen.set_defaults(func=cmd_scenarios)
    return parser


def _config(args: argparse.Namespace, **extra: Any) -> AgentConfig:
    return load_config(args.config, simulate=getattr(args, "simulate", None), **extra)


def cmd_serve(args: argparse.Namespace) -> int:
    from node_agent import logfmt, sdnotify
    from node_agent.agent import Agent
    from node_agent.server import AgentHTTPServer
    from node_agent.tls import TLSConfigError, server_context

    try:
        cfg = _config(args, listen=args.listen, secret_file=args.secret_file, name=args.name, log_level=args.log_level,
                      log_format=args.log_format, tls_cert=args.tls_cert, tls_key=args.tls_key,
                      tls_client_ca=args.tls_client_ca)
    except ConfigError as exc:
        return _fail(f"error: {exc}")
    logfmt.setup(cfg.log_level, cfg.log_format, sys.stderr)
    if not cfg.secret_file:
        return _fail("refusing to start: no secret file (--secret-file or NODE_AGENT_SECRET_FILE)")
    try:
        secret = load_secret(cfg.secret_file)
    except SecretFileError as exc:
        return _fail(f"refusing to start: {exc}")
    try:
        tls = server_context(cfg.tls_cert, cfg.tls_key, cfg.tls_client_ca) if cfg.tls_cert else None
    except TLSConfigError as exc:
        return _fail(f"refusing to start: {exc}")
    try:
        agent = Agent(cfg)
    except ScenarioError as exc:
        return _fail(f"error: {exc}")
    host, port = cfg.listen_addr()
    try:
        server = AgentHTTPServer((host, port), agent, secret, tls)
    except OSError as exc:
        agent.close()
        return _fail(f"cannot listen on {cfg.listen}: {exc.strerror}", 1)

    def stop(signum: int, _frame: Any) -> None:
        sdnotify.notify("STOPPING=1")
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    agent.start()
    bound = server.server_address
    mode = f" (SIMULATED scenario {agent.scenario})" if agent.simulated else ""
    if tls is not None:
        mode += " (TLS, client certificate required)" if cfg.tls_client_ca else " (TLS)"
    listening = f"listening on {server.scheme}://{bound[0]}:{bound[1]} as {agent.name}{mode}"
    print(f"node-agent {__version__} {listening}", file=sys.stderr, flush=True)
    # The socket accepts from here on (the selector loop starts below): systemd may start what needs us.
    sdnotify.notify(f"READY=1\nSTATUS={listening}")
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        server.server_close()
        agent.close()
    return 0


def cmd_probe(args: argparse.Namespace) -> int:
    from node_agent.agent import Agent
    from node_agent.report import render

    unknown = [p for p in args.probes if p not in PROBE_NAMES]
    if unknown:
        return _fail(f"unknown probe(s) {', '.join(unknown)}; known: {', '.join(PROBE_NAMES)}")
    try:
        cfg = _config(args)
        logging.basicConfig(level="WARNING", stream=sys.stderr, format="node-agent: %(levelname)s %(message)s")
        agent = Agent(cfg)
    except (ConfigError, ScenarioError) as exc:
        return _fail(f"error: {exc}")
    now = time.time()
    req = ProbeRequest(
        probes=args.probes or None, gpus=args.gpus, job_id=args.job_id, job_pids=args.job_pids,
        job_gpus=args.job_gpus, window=None if args.since is None else (now - args.since, now + 60),
        deadline_s=args.timeout,
    )
    try:
        answer = agent.probe(req)
    finally:
        agent.close()
    print(json.dumps(answer, indent=2) if args.json else render(answer, args.verbose))
    return 1 if any(r["health"] == "failed" for r in answer["results"]) else 0


def cmd_scenarios(args: argparse.Namespace) -> int:
    from node_agent.simulate import load_scenario

    for name in list_scenarios():
        try:
            desc = load_scenario(name).get("description", "")
        except ScenarioError as exc:
            desc = f"(invalid: {exc})"
        print(f"{name:<22} {desc}")
    return 0


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


if __name__ == "__main__":
    sys.exit(main())
