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

# Each rule: (kind, hints, pattern, replacement). A rule runs only if one of its hints (lower-case
# substrings) occurs in the text, so a clean log line costs a few substring checks, not 15 regex
# passes. Replacements keep the key name / prefix so a reader knows what was removed
# ("HF_TOKEN=[REDACTED]", "xoxb-[REDACTED]").
_KEYWORDS = ("password", "passwd", "passphrase", "secret", "token", "apikey", "api_key", "api-key", "accesskey",
             "access_key", "privatekey", "private_key", "credential", "authkey", "auth_key")
_RULES: list[tuple[str, tuple[str, ...], re.Pattern[str], str]] = [
    # PEM private keys; also an unterminated block (a truncated paste) up to 60 lines.
    ("private-key", ("private key",),
     re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
                r"(?:.*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|(?:[^\n]*\n?){0,60})", re.S),
     "-----BEGIN PRIVATE KEY----- " + MASK + " -----END PRIVATE KEY-----"),
    # Slack: bot/user/app/config tokens and incoming-webhook URLs.
    ("slack-token", ("xox", "xapp-"), re.compile(r"\b(xox[abposre]|xapp|xoxe\.xox[bp])-[0-9A-Za-z-]{8,}"),
     r"\1-" + MASK),
    ("slack-webhook", ("hooks.slack.com",),
     re.compile(r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9/_-]+"),
     "https://hooks.slack.com/" + MASK),
    # GitHub: classic (ghp_, gho_, ghu_, ghs_, ghr_) and fine-grained tokens.
    ("github-token", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), re.compile(r"\b(gh[pousr])_[A-Za-z0-9]{30,}"),
     r"\1_" + MASK),
    ("github-token", ("github_pat_",), re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}"), "github_pat_" + MASK),
    # Hugging Face user and org tokens.
    ("hf-token", ("hf_", "api_org_"), re.compile(r"\b(hf|api_org)_[A-Za-z0-9]{30,}"), r"\1_" + MASK),
    # AWS access key ids; secret keys are caught here and by the key=value rule below.
    ("aws-key-id", ("akia", "asia", "abia", "acca"), re.compile(r"\b(AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b"),
     r"\1" + MASK),
    ("aws-secret", ("aws",),
     re.compile(r"(?i)(aws_?secret_?access_?key|aws_?session_?token)(\s*[=:]\s*|\s+)['\"]?[A-Za-z0-9/+=]{16,}['\"]?"),
     r"\1\2" + MASK),
    # W&B: WANDB_API_KEY=<key> and `wandb login <key>`.
    ("wandb-key", ("wandb",),
     re.compile(r"(?i)(wandb[_-]?api[_-]?key)(\s*[=:]\s*)['\"]?[A-Za-z0-9_-]{20,}['\"]?"), r"\1\2" + MASK),
    ("wandb-key", ("wandb",), re.compile(r"(?i)(wandb\s+login\s+(?:--relogin\s+)?)[0-9a-f]{40}\b"), r"\1" + MASK),
    # Bearer / basic auth headers, and JWTs wherever they appear.
    ("auth-header", ("authorization",),
     re.compile(r"(?i)\b(authorization\s*[:=]\s*(?:bearer|basic|token)\s+)[A-Za-z0-9._~+/=-]{8,}"), r"\1" + MASK),
    ("jwt", ("eyj",), re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), MASK),
    # user:password@ in URLs (database DSNs, git remotes, proxies).
    ("url-password", ("://",), re.compile(r"\b([a-z][a-z0-9+.-]*://[^\s:/@]+:)[^\s@/]+@"), r"\1" + MASK + "@"),
    # Env dumps and config: NAME=value where NAME ends in a secret-ish word. The pattern starts at
    # the word (fast to find); the name before it stays. `max_tokens=512` survives (the word must be
    # followed by = or :), `PWD=/home/x` survives (the shell's cwd, not a password).
    ("env-secret", _KEYWORDS,
     re.compile(r"(?i)(password|passwd|passphrase|secret(?:_?key)?|token|api[_-]?key|access[_-]?key|"
                r"private[_-]?key|credentials?|auth[_-]?key)(\s*[=:]\s*)(\"[^\"\n]*\"|'[^'\n]*'|[^\s,;]+)"),
     r"\1\2" + MASK),
    # Command-line flags: --password x, --token=x, --api-key x.
    ("flag-secret", ("--",),
     re.compile(r"(?i)(--(?:password|passwd|token|api-key|apikey|secret|access-key|auth-token)(?:=|\s+))[^\s-][^\s]*"),
     r"\1" + MASK),
]
_ALL_HINTS = tuple(sorted({h for _, hints, _, _ in _RULES for h in hints}))
# Case-insensitive patterns are slow in `re` (0.4 s per 2 MB for the env rule); their lower-case
# twin runs on text.lower() instead (5x faster) and the original-case pattern only re-matches the hits.
_LOWER = {id(p): re.compile(p.pattern.removeprefix("(?i)"), p.flags & ~re.IGNORECASE)
          for _, _, p, _ in _RULES if p.flags & re.IGNORECASE}


def _subn(pattern: re.Pattern[str], repl: str, text: str) -> tuple[str, int]:
    lower = _LOWER.get(id(pattern))
    if lower is None:
        return pattern.subn(repl, text)
    low = text.lower()
    if len(low) != len(text):  # a character whose lower case has another length: offsets would drift
        return pattern.subn(repl, text)
    out: list[str] = []
    pos = n = 0
    for m in lower.finditer(low):
        start, end = m.span()
        orig = pattern.fullmatch(text, start, end)
        if orig is None:
            continue
        out.append(text[pos:start])
        out.append(orig.expand(repl))
        pos, n = end, n + 1
    if not n:
        return text, 0
    out.append(text[pos:])
    return "".join(out), n


@dataclass
class Redacted:
    text: str
    count: int = 0
    kinds: list[str] = field(default_factory=list)


def redact_text(text: str) -> Redacted:
    """Redact `text`; returns the result and what was removed (kinds, for the audit trail)."""
    low = text.lower()
    present = {h for h in _ALL_HINTS if h in low}
    if not present:
        return Redacted(text)
    count = 0
    kinds: list[str] = []
    for kind, hints, pattern, repl in _RULES:
        if present.isdisjoint(hints):
            continue
        text, n = _subn(pattern, repl, text)
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
