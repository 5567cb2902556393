"""Bot settings from the environment; every mistake is reported at start-up with the variable's name."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlparse


class SettingsError(Exception):
    """A setting is missing or malformed; the message names the variable and how to fix it."""


@dataclass(frozen=True)
class Settings:
    bot_token: str
    signing_secret: str | None = None  # HTTP mode: verifies X-Slack-Signature
    app_token: str | None = None  # Socket Mode: xapp-... with connections:write
    api_url: str | None = None  # another Slack Web API base URL (a local stand-in in tests)
    db_path: str = "triage.db"
    channel: str | None = None  # default channel for webhook incidents
    routes: str | None = None  # TRIAGE_ROUTES: a YAML file path or inline YAML
    webhook_secret_file: str | None = None
    agent_url: str | None = None  # e.g. http://{host}:9477
    agent_map: str | None = None
    agent_allow: str | None = None  # TRIAGE_AGENT_ALLOW: host globs and CIDRs (bot.probes.targets)
    agent_secret_file: str | None = None
    agent_ca_file: str | None = None  # TRIAGE_AGENT_CA_FILE: verifies https:// agents (docs/node-agent.md)
    agent_client_cert: str | None = None  # TRIAGE_AGENT_CLIENT_CERT/_KEY: for agents with --tls-client-ca
    agent_client_key: str | None = None
    probe_deadline_s: float = 3.0
    job_source: str = "none"
    max_upload_mb: int = 200
    max_unpacked_mb: int = 4096
    retention_days: int = 90
    workers: int = 8
    queue_max: int = 200
    bot_sources: frozenset[str] = frozenset()  # TRIAGE_BOT_SOURCES: channel ids and bot ids
    group_job_window_s: float = 24 * 3600.0  # TRIAGE_GROUP_JOB_WINDOW_S: one job's failures share a thread
    group_host_window_s: float = 900.0  # TRIAGE_GROUP_HOST_WINDOW_S: one host's failures share a thread
    storm_threshold: int = 5  # TRIAGE_STORM_THRESHOLD: incidents in a partition that make a storm (0: off)
    storm_window_s: float = 600.0  # TRIAGE_STORM_WINDOW_S
    group_paste_window_s: float = 1800.0  # TRIAGE_GROUP_PASTE_WINDOW_S: pasted logs of one job share a thread
    user_email_domain: str | None = None  # TRIAGE_USER_EMAIL_DOMAIN: job user -> user@domain -> Slack user
    user_map: str | None = None  # TRIAGE_USER_MAP: YAML file or inline YAML, job user -> U… or email
    drain_users: frozenset[str] = frozenset()  # TRIAGE_DRAIN_USERS: Slack user ids who may drain / resume
    drain_groups: tuple[str, ...] = ()  # TRIAGE_DRAIN_USERGROUP: Slack user group ids (S…) who may too
    alert_secret_file: str | None = None  # TRIAGE_ALERTMANAGER_SECRET_FILE: POST /hooks/alertmanager
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def agents_configured(self) -> bool:
        return bool((self.agent_url or self.agent_map) and self.agent_secret_file)

    @property
    def max_upload_bytes(self) -> int:
        return self.max_upload_mb << 20

    @property
    def max_unpacked_bytes(self) -> int:
        return self.max_unpacked_mb << 20

    def download_hosts(self) -> set[str]:
        """Hosts the bot token may be sent to when downloading files (never an arbitrary URL)."""
        hosts = {"files.slack.com"}
        if self.api_url:
            host = urlparse(self.api_url).hostname
            if host:
                hosts.add(host)
        return hosts

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env

        def get(name: str) -> str | None:
            v = env.get(name)
            return v.strip() if v and v.strip() else None

        def num(name: str, default: float, kind: type = int, lo: float = 0) -> float:
            raw = get(name)
            if raw is None:
                return default
            try:
                value = kind(raw)
            except ValueError:
                raise SettingsError(f"{name}={raw!r} is not a {'whole ' if kind is int else ''}number") from None
            if value < lo:
                raise SettingsError(f"{name}={raw!r} must be at least {lo}")
            return value

        # systemd credentials (LoadCredential=, deploy/systemd/triage-bot.service): a variable that is set wins;
        # a blank credential (the unit's SetCredential= default for a secret not installed) counts as unset.
        creds_dir = get("CREDENTIALS_DIRECTORY")

        def credential_file(name: str) -> str | None:
            if not creds_dir:
                return None
            path = os.path.join(creds_dir, name)
            try:
                with open(path, "rb") as fh:
                    return path if fh.read(1 << 16).strip() else None
            except OSError:
                return None

        def credential(name: str) -> str | None:
            path = credential_file(name)
            if path is None:
                return None
            try:
                with open(path, encoding="utf-8") as fh:
                    return fh.read().strip() or None
            except (OSError, UnicodeDecodeError) as exc:
                raise SettingsError(f"cannot read the credential {name} in $CREDENTIALS_DIRECTORY: {exc}") from None

        token = get("SLACK_BOT_TOKEN") or credential("slack-bot-token")
        if not token:
            raise SettingsError("SLACK_BOT_TOKEN is not set (the Bot User OAuth Token, xoxb-..., from OAuth & Permissions)")
        api_url = get("SLACK_API_URL")
        if api_url:
            if urlparse(api_url).scheme not in ("http", "https"):
                raise SettingsError(f"SLACK_API_URL={api_url!r} is not an http(s) URL")
            if not api_url.endswith("/"):
                api_url += "/"  # slack_sdk joins method names onto the base URL
        job_source = (get("TRIAGE_JOB_SOURCE") or "none").lower()
        if job_source not in ("none", "slurm"):
            raise SettingsError(f"TRIAGE_JOB_SOURCE={job_source!r}: expected 'none' or 'slurm'")
        max_upload = int(num("TRIAGE_MAX_UPLOAD_MB", 200, int, 1))
        bot_sources = frozenset(x for x in re.split(r"[\s,]+", get("TRIAGE_BOT_SOURCES") or "") if x)
        for x in bot_sources:
            if not re.fullmatch(r"[CGDB][A-Z0-9]{2,}", x):
                raise SettingsError(f"TRIAGE_BOT_SOURCES: {x!r} is not a channel id (C…, G…) or bot id (B…); "
                                    "a channel's id is at the bottom of its details, a bot's in its profile")
        drain_users = frozenset(x for x in re.split(r"[\s,]+", get("TRIAGE_DRAIN_USERS") or "") if x)
        for x in drain_users:
            if not re.fullmatch(r"[UW][A-Z0-9]{2,}", x):
                raise SettingsError(f"TRIAGE_DRAIN_USERS: {x!r} is not a Slack user id (U…, W…: a profile's "
                                    "⋮ menu > Copy member ID)")
        drain_groups = tuple(dict.fromkeys(x for x in re.split(r"[\s,]+", get("TRIAGE_DRAIN_USERGROUP") or "") if x))
        for x in drain_groups:
            if not re.fullmatch(r"S[A-Z0-9]{2,}", x):
                raise SettingsError(f"TRIAGE_DRAIN_USERGROUP: {x!r} is not a user group id (S…: the group's "
                                    "page in People > User groups, or usergroups.list)")
        return cls(
            bot_token=token,
            signing_secret=get("SLACK_SIGNING_SECRET") or credential("slack-signing-secret"),
            app_token=get("SLACK_APP_TOKEN") or credential("slack-app-token"),
            api_url=api_url,
            db_path=get("TRIAGE_DB") or "triage.db",
            channel=get("TRIAGE_CHANNEL"),
            routes=get("TRIAGE_ROUTES"),
            webhook_secret_file=get("TRIAGE_WEBHOOK_SECRET_FILE") or credential_file("webhook-secret"),
            agent_url=get("TRIAGE_AGENT_URL"),
            agent_map=get("TRIAGE_AGENT_MAP"),
            agent_allow=get("TRIAGE_AGENT_ALLOW"),
            agent_secret_file=get("TRIAGE_AGENT_SECRET_FILE") or credential_file("agent-secret"),
            agent_ca_file=get("TRIAGE_AGENT_CA_FILE"),
            agent_client_cert=get("TRIAGE_AGENT_CLIENT_CERT"),
            agent_client_key=get("TRIAGE_AGENT_CLIENT_KEY"),
            probe_deadline_s=float(num("TRIAGE_PROBE_DEADLINE_S", 3.0, float, 0.1)),
            job_source=job_source,
            max_upload_mb=max_upload,
            max_unpacked_mb=int(num("TRIAGE_MAX_UNPACKED_MB", max(4096, max_upload * 20), int, 1)),
            retention_days=int(num("TRIAGE_RETENTION_DAYS", 90, int, 1)),
            workers=int(num("TRIAGE_WORKERS", 8, int, 1)),
            queue_max=int(num("TRIAGE_QUEUE_MAX", 200, int, 1)),
            bot_sources=bot_sources,
            group_job_window_s=float(num("TRIAGE_GROUP_JOB_WINDOW_S", 24 * 3600.0, float, 0)),
            group_host_window_s=float(num("TRIAGE_GROUP_HOST_WINDOW_S", 900.0, float, 0)),
            storm_threshold=int(num("TRIAGE_STORM_THRESHOLD", 5, int, 0)),
            storm_window_s=float(num("TRIAGE_STORM_WINDOW_S", 600.0, float, 1)),
            group_paste_window_s=float(num("TRIAGE_GROUP_PASTE_WINDOW_S", 1800.0, float, 0)),
            user_email_domain=get("TRIAGE_USER_EMAIL_DOMAIN"),
            user_map=get("TRIAGE_USER_MAP"),
            drain_users=drain_users,
            drain_groups=drain_groups,
            alert_secret_file=get("TRIAGE_ALERTMANAGER_SECRET_FILE") or credential_file("alertmanager-secret"),
        )

    def require_http(self) -> None:
        if not self.signing_secret:
            raise SettingsError("HTTP mode needs SLACK_SIGNING_SECRET (Basic Information > App Credentials > "
                                "Signing Secret)")

    def require_socket(self) -> None:
        if not self.app_token:
            raise SettingsError("Socket Mode needs SLACK_APP_TOKEN (Basic Information > App-Level Tokens, "
                                "scope connections:write; starts with xapp-)")
        if not self.app_token.startswith("xapp-"):
            raise SettingsError("SLACK_APP_TOKEN must be an app-level token starting with xapp-")
