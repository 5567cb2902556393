"""`triage serve [--http --port N | --socket] [--hooks-port N]`: run the Slack bot."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="run the Slack bot (Socket Mode, or HTTP at /slack/events) and the scheduler webhook",
        description="Run the Slack bot. Settings come from the environment: SLACK_BOT_TOKEN, SLACK_APP_TOKEN "
                    "(Socket Mode) or SLACK_SIGNING_SECRET (HTTP), TRIAGE_DB, TRIAGE_CHANNEL, TRIAGE_ROUTES, "
                    "TRIAGE_WEBHOOK_SECRET_FILE, TRIAGE_AGENT_URL/_MAP/_SECRET_FILE, TRIAGE_JOB_SOURCE, "
                    "TRIAGE_MAX_UPLOAD_MB, TRIAGE_RETENTION_DAYS, TRIAGE_WORKERS; see docs/slack.md.",
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--socket", action="store_true", help="Socket Mode (default when SLACK_APP_TOKEN is set)")
    mode.add_argument("--http", action="store_true", help="HTTP mode: Slack posts to http://HOST:PORT/slack/events")
    p.add_argument("--port", type=int, default=int(os.environ.get("PORT", "3000")), help="HTTP port (default 3000)")
    p.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    p.add_argument("--hooks-port", type=int, metavar="N",
                   help="Socket Mode: also listen on N for POST /hooks/job-failed and GET /healthz")
    p.add_argument("--log-level", default=os.environ.get("TRIAGE_LOG_LEVEL", "INFO"), help="DEBUG, INFO, WARNING")
    p.add_argument("--log-format", choices=("text", "json"), default=None,
                   help="text (default) or json: one JSON object per line (env TRIAGE_LOG_FORMAT)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Workers scan logs (CPU) while HTTP threads must ack Slack within 3 s: hand the GIL over every
    # 1 ms instead of 5 ms so an ack never queues behind a long stretch of scanning.
    sys.setswitchinterval(0.001)
    from bot import logsafe
    from node_agent import logfmt, sdnotify

    logsafe.install()  # before the first record: every line redacted and bounded, no request body
    log_format = (args.log_format or os.environ.get("TRIAGE_LOG_FORMAT") or "text").strip().lower()
    try:
        logfmt.setup(args.log_level, log_format, sys.stderr, clean=logsafe.clean_message)
    except ValueError as exc:
        print(f"triage serve: {exc} (--log-level / --log-format, TRIAGE_LOG_LEVEL / TRIAGE_LOG_FORMAT)",
              file=sys.stderr)
        return 2
    from slack_bolt.error import BoltError
    from slack_sdk.errors import SlackApiError

    from bot.slack.runtime import TriageBot
    from bot.slack.settings import Settings, SettingsError
    from bot.store import StoreError

    try:
        settings = Settings.from_env()
        socket_mode = args.socket or (not args.http and bool(settings.app_token))
        if socket_mode:
            settings.require_socket()
        else:
            settings.require_http()
        bot = TriageBot(settings)
    except (SettingsError, StoreError) as exc:
        print(f"triage serve: {exc}", file=sys.stderr)
        return 2
    except (BoltError, SlackApiError, OSError) as exc:  # auth.test at start-up: bad token, Slack unreachable
        print(f"triage serve: cannot start with this Slack token: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        sdnotify.notify("STOPPING=1")
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        if socket_mode:
            bot.connect_socket_mode()
            status = "connected to Slack over Socket Mode"
            if args.hooks_port is not None:
                hooks = bot.serve_http(args.hooks_port, args.host, slack=False)
                status += f"; hooks, /healthz and /metrics on {hooks.url}"
        else:
            server = bot.serve_http(args.port, args.host, slack=True)
            print(f"triage serve: listening on {server.url}/slack/events", file=sys.stderr, flush=True)
            status = f"listening on {server.url}/slack/events"
        # Type=notify (deploy/systemd/triage-bot.service): started means Slack is reachable and the ports
        # accept, not merely that the process exists.
        sdnotify.notify(f"READY=1\nSTATUS={status}")
        stop.wait()
    except OSError as exc:
        print(f"triage serve: {exc}", file=sys.stderr)
        return 2
    finally:
        bot.close()
    return 0
