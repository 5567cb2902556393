"""Which channel a scheduler incident goes to (TRIAGE_ROUTES), falling back to TRIAGE_CHANNEL.

    # TRIAGE_ROUTES (a file path, or the YAML itself)
    routes:
      - match: {cluster: eos, partition: "h200*"}   # every key must match (shell-style globs)
        channel: C0123ABCD                          # a channel id, or #name
      - match: {user: alice}
        channel: "#alice-jobs"
    default: "#gpu-oncall"                          # optional; else TRIAGE_CHANNEL

Alertmanager alerts (bot.service.alertmanager) also match on alertname, severity and host.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

import yaml

MATCH_KEYS = ("partition", "cluster", "user", "name", "state", "account", "qos", "alertname", "severity", "host")


class RoutesError(ValueError):
    pass


@dataclass(frozen=True)
class Rule:
    match: dict[str, str]
    channel: str

    def matches(self, job: Mapping[str, object]) -> bool:
        return all(fnmatch.fnmatchcase(str(job.get(k) or ""), pat) for k, pat in self.match.items())


@dataclass(frozen=True)
class Routes:
    rules: list[Rule] = field(default_factory=list)
    default: str | None = None

    def channel_for(self, job: Mapping[str, object]) -> str | None:
        for rule in self.rules:
            if rule.matches(job):
                return rule.channel
        return self.default

    @classmethod
    def load(cls, spec: str | None, default_channel: str | None) -> Routes:
        if not spec:
            return cls([], default_channel)
        text = spec
        if "\n" not in spec and os.path.exists(spec):
            with open(spec, encoding="utf-8") as fh:
                text = fh.read()
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise RoutesError(f"TRIAGE_ROUTES is not valid YAML: {exc}") from None
        if data is None:
            return cls([], default_channel)
        if not isinstance(data, dict) or not isinstance(data.get("routes", []), list):
            raise RoutesError("TRIAGE_ROUTES: expected a mapping with a 'routes' list (see docs/slack.md)")
        rules = []
        for i, r in enumerate(data.get("routes") or []):
            if not isinstance(r, dict) or not isinstance(r.get("channel"), str) or not isinstance(r.get("match", {}), dict):
                raise RoutesError(f"TRIAGE_ROUTES: route {i + 1} needs 'match' (mapping) and 'channel' (string)")
            unknown = set(r.get("match", {})) - set(MATCH_KEYS)
            if unknown:
                raise RoutesError(f"TRIAGE_ROUTES: route {i + 1} matches on unknown key(s) {sorted(unknown)}; "
                                  f"known: {', '.join(MATCH_KEYS)}")
            rules.append(Rule({k: str(v) for k, v in (r.get("match") or {}).items()}, r["channel"]))
        default = data.get("default") or default_channel
        return cls(rules, str(default) if default else None)
