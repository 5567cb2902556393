"""Remove secrets from pasted logs before anything is stored or echoed back to Slack.

People paste whole job logs, and job logs carry env dumps (`HF_TOKEN=hf_...`, `WANDB_API_KEY=...`),
launch commands (`--password ...`), URLs with credentials and sometimes private keys. Every text
the bot keeps (store) or shows (Slack messages, files, modals) goes through `redact()` first.

Patterns err on the side of redacting: a lost token value costs nothing for a diagnosis, a leaked
one costs a rotation. What stays is the key name, so the reader still sees what was there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

MASK = "[REDACTED]"

# Each rule: (kind, compiled pattern, replacement). Replacements keep the key name / prefix so a
# reader knows what was removed ("HF_TOKEN=[REDACTED]", "xoxb-[REDACTED]").
_RULES: list[tuple[str, re.Pattern[str], str]] = [
    # PEM private keys; also an unterminated block (a truncated paste) up to 60 lines.
    ("private-key",
     re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
                r"(?:.*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|(?:[^\n]*\n?){0,60})", re.S),
     "-----BEGIN PRIVATE KEY----- " + MASK + " -----END PRIVATE KEY-----"),
    # Slack: bot/user/app/config tokens and incoming-webhook URLs.
    ("slack-token", re.compile(r"\b(xox[abposre]|xapp|xoxe\.xox[bp])-[0-9A-Za-z-]{8,}"), r"\1-" + MASK),
    ("slack-webhook", re.compile(r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9/_-]+"),
     "https://hooks.slack.com/" + MASK),
    # GitHub: classic (ghp_, gho_, ghu_, ghs_, ghr_) and fine-grained tokens.
    ("github-token", re.compile(r"\b(gh[pousr])_[A-Za-z0-9]{30,}"), r"\1_" + MASK),
    ("github-token", re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}"), "github_pat_" + MASK),
    # Hugging Face user and org tokens.
    ("hf-token", re.compile(r"\b(hf|api_org)_[A-Za-z0-9]{30,}"), r"\1_" + MASK),
    # AWS access key ids; secret keys are caught by the key=value rule below and by this one.
    ("aws-key-id", re.compile(r"\b(AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b"), r"\1" + MASK),
    ("aws-secret", re.compile(r"(?i)(aws_?secret_?access_?key|aws_?session_?token)(\s*[=:]\s*|\s+)['\"]?[A-Za-z0-9/+=]{16,}['\"]?"),
     r"\1\2" + MASK),
    # W&B: WANDB_API_KEY=<40 hex> and `wandb login <key>`.
    ("wandb-key", re.compile(r"(?i)(wandb[_-]?api[_-]?key)(\s*[=:]\s*)['\"]?[A-Za-z0-9_-]{20,}['\"]?"), r"\1\2" + MASK),
    ("wandb-key", re.compile(r"(?i)(wandb\s+login\s+(?:--relogin\s+)?)[0-9a-f]{40}\b"), r"\1" + MASK),
    # Bearer / basic auth headers, and JWTs wherever they appear.
    ("auth-header", re.compile(r"(?i)\b(authorization\s*[:=]\s*(?:bearer|basic|token)\s+)[A-Za-z0-9._~+/=-]{8,}"),
     r"\1" + MASK),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), MASK),
    # user:password@ in URLs (database DSNs, git remotes, proxies).
    ("url-password", re.compile(r"\b([a-z][a-z0-9+.-]*://[^\s:/@]+:)[^\s@/]+@"), r"\1" + MASK + "@"),
    # Env dumps and config: NAME=value where NAME ends in a secret-ish word. `max_tokens=512`
    # survives (plural), `PWD=/home/x` survives (the shell's cwd, not a password).
    ("env-secret",
     re.compile(r"(?i)\b([A-Z0-9_.-]*?(?:PASSWORD|PASSWD|PASSPHRASE|SECRET|SECRET_KEY|TOKEN|API_?KEY|"
                r"ACCESS_?KEY|PRIVATE_?KEY|CREDENTIALS?|AUTH_?KEY))(\s*[=:]\s*)"
                r"(\"[^\"\n]*\"|'[^'\n]*'|[^\s,;]+)"),
     r"\1\2" + MASK),
    # Command-line flags: --password x, --token=x, --api-key x.
    ("flag-secret",
     re.compile(r"(?i)(--(?:password|passwd|token|api-key|apikey|secret|access-key|auth-token)(?:=|\s+))[^\s-][^\s]*"),
     r"\1" + MASK),
]

# Cheap pre-check: if none of these substrings occur, the text cannot match any rule (saves the
# full regex pass on large clean logs). Lower-cased comparison.
_HINTS = ("private key", "xox", "xapp-", "hooks.slack.com", "gh", "github_pat_", "hf_", "api_org_", "akia",
          "asia", "abia", "acca", "aws", "wandb", "authorization", "eyj", "://", "pass", "secret",
          "token", "key", "credential", "auth")


@dataclass
class Redacted:
    text: str
    count: int = 0
    kinds: list[str] = field(default_factory=list)


def redact_text(text: str) -> Redacted:
    """Redact `text`; returns the result and what was removed (kinds, for the audit trail)."""
    low = text.lower()
    if not any(h in low for h in _HINTS):
        return Redacted(text)
    count = 0
    kinds: list[str] = []
    for kind, pattern, repl in _RULES:
        text, n = pattern.subn(repl, text)
        if n:
            count += n
            if kind not in kinds:
                kinds.append(kind)
    return Redacted(text, count, kinds)


def redact(text: str) -> str:
    return redact_text(text).text


def redact_bytes(data: bytes) -> Redacted:
    """Decode (UTF-8, invalid bytes replaced) and redact."""
    return redact_text(data.decode("utf-8", "replace"))


def redact_deep(obj: Any) -> Any:
    """Redact every string inside JSON-like data (reports, probe results) before storing/echoing."""
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, dict):
        return {k: redact_deep(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact_deep(v) for v in obj]
    return obj


__all__ = ["MASK", "Redacted", "redact", "redact_bytes", "redact_deep", "redact_text"]
