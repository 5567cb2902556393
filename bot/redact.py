"""Remove secrets from pasted logs before anything is stored or echoed back to Slack.

People paste whole job logs, and job logs carry env dumps (`HF_TOKEN=hf_...`, `WANDB_API_KEY=...`),
launch commands (`--password ...`), URLs with credentials and sometimes private keys. Every text
the bot keeps (store) or shows (Slack messages, files, modals) goes through `redact()` first.

Patterns err on the side of redacting: a lost token value costs nothing for a diagnosis, a leaked
one costs a rotation. What stays is the key name, so the reader still sees what was there.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

MASK = "[REDACTED]"

# Each rule: (kind, hints, pattern, replacement). A rule runs only if one of its hints (lower-case
# substrings) occurs in the text, so a clean log line costs a few substring checks, not 15 regex
# passes. Replacements keep the key name / prefix so a reader knows what was removed
# ("HF_TOKEN=[REDACTED]", "xoxb-[REDACTED]").
_KEYWORDS = ("password", "passwd", "passphrase", "secret", "token", "apikey", "api_key", "api-key", "accesskey",
             "access_key", "access-key", "privatekey", "private_key", "credential", "authkey", "auth_key")
# A value that is redacted already is left alone (and not counted again): redacting twice is a no-op.
_NOT_MASKED = r"(?!\[REDACTED\])"
# Prefixed provider tokens: (kind, prefix as printed, body pattern). The prefix stays in the output.
_PREFIXED: list[tuple[str, str, str]] = [
    ("gitlab-token", "glpat-", r"[A-Za-z0-9_-]{20,}"),
    ("gitlab-token", "gldt-", r"[A-Za-z0-9_-]{20,}"),
    ("npm-token", "npm_", r"[A-Za-z0-9]{36}"),
    ("pypi-token", "pypi-", r"AgE[A-Za-z0-9_-]{30,}"),
    ("anthropic-key", "sk-ant-", r"[A-Za-z0-9_-]{30,}"),
    ("openai-key", "sk-", r"(?=[A-Za-z0-9_-]*[0-9])[A-Za-z0-9_-]{32,}"),
    ("stripe-key", "sk_live_", r"[A-Za-z0-9]{16,}"),
    ("stripe-key", "sk_test_", r"[A-Za-z0-9]{16,}"),
    ("stripe-key", "rk_live_", r"[A-Za-z0-9]{16,}"),
    ("stripe-key", "rk_test_", r"[A-Za-z0-9]{16,}"),
    ("stripe-key", "whsec_", r"[A-Za-z0-9]{24,}"),
    ("sendgrid-key", "SG.", r"[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}"),
    ("gcp-api-key", "AIza", r"[0-9A-Za-z_-]{35}"),
    ("gcp-oauth", "ya29.", r"[0-9A-Za-z_-]{20,}"),
    ("gcp-oauth", "GOCSPX-", r"[0-9A-Za-z_-]{20,}"),
    ("databricks-token", "dapi", r"[0-9a-f]{32}(?:-\d)?"),
    ("digitalocean-token", "dop_v1_", r"[0-9a-f]{64}"),
    ("digitalocean-token", "doo_v1_", r"[0-9a-f]{64}"),
    ("ngc-key", "nvapi-", r"[A-Za-z0-9_-]{40,}"),
    ("twilio-key", "SK", r"[0-9a-f]{32}"),
    ("vault-token", "hvs.", r"[A-Za-z0-9_-]{24,}"),
    ("vault-token", "hvb.", r"[A-Za-z0-9_-]{24,}"),
    ("grafana-token", "glsa_", r"[A-Za-z0-9_]{32,}"),
    ("grafana-token", "glc_", r"[A-Za-z0-9_+/=]{32,}"),
    ("replicate-token", "r8_", r"[A-Za-z0-9]{30,}"),
    ("groq-key", "gsk_", r"[A-Za-z0-9]{40,}"),
    ("shopify-token", "shpat_", r"[a-fA-F0-9]{32}"),
    ("linear-key", "lin_api_", r"[A-Za-z0-9]{32,}"),
    ("postman-key", "PMAK-", r"[A-Za-z0-9-]{40,}"),
    ("age-key", "AGE-SECRET-KEY-", r"1[0-9A-Z]{40,}"),
    ("atlassian-token", "ATATT", r"[A-Za-z0-9_=-]{40,}"),
]
# key=value / "key": "value" / 'key': 'value': the separator, the value (quoted or bare; the quote
# is group 3 and stays), and what is not a value: a variable reference ($HF_TOKEN, ${X}), None /
# null / true / false, an empty string, a tokenizer's special token (<|im_end|>, <s>).
_SEP = r"(['\"]?\s*[=:]\s*)"
_VALUE = r"(?:([\"'])(?:(?!\3)[^\n])+\3|[^\s,;'\"}]+)"
_NOT_A_VALUE = (r"(?![\"']?(?:\$\{?\w+\}?|none|null|nil|true|false|<\|?[^>\s]{0,40}\|?>)(?:[\"'\s,;}]|$))")


def _pem_mask(m: re.Match[str]) -> str:
    # as many line breaks as the block had: the lines after it keep their numbers (file:line)
    return "-----BEGIN PRIVATE KEY----- " + MASK + " -----END PRIVATE KEY-----" + "\n" * m.group(0).count("\n")


_RULES: list[tuple[str, tuple[str, ...], re.Pattern[str], Any]] = [
    # PEM private keys; also an unterminated block (a truncated paste) up to 60 lines.
    # PEM private keys, up to their END line (at most 200 lines on, never past another BEGIN); an unterminated block (a
    # truncated paste) takes the key-material lines that follow (base64, maybe behind a "[rank0]: "
    # prefix), blank lines and headers (Proc-Type:, DEK-Info:), and not the log lines after them.
    ("private-key", ("private key",),
     re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----(?! \[REDACTED\] -----END)"
                r"(?:(?:(?:(?!-----BEGIN )[^\n])*\n){0,200}?(?:(?!-----BEGIN )[^\n])*?"
                r"-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
                r"|[^\n]*(?:\n(?:[^\n]{0,40}?[A-Za-z0-9+/=]{16,}|[ \t]*|[A-Za-z-]+: [^\n]*)[ \t]*(?=\n|$)){0,60})"),
     _pem_mask),
    # Slack: bot/user/app/config tokens and incoming-webhook URLs.
    ("slack-token", ("xox", "xapp-"), re.compile(r"\b(xox[abposre]|xapp|xoxe\.xox[bp])-" + _NOT_MASKED + r"[0-9A-Za-z-]{8,}"),
     r"\1-" + MASK),
    ("slack-webhook", ("hooks.slack.com",),
     re.compile(r"https://hooks\.slack\.com/(?:services|workflows|triggers)/" + _NOT_MASKED + r"[A-Za-z0-9/_-]+"),
     "https://hooks.slack.com/" + MASK),
    ("discord-webhook", ("/api/webhooks/",),
     re.compile(r"(https://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/\d+/)[A-Za-z0-9_-]{20,}"), r"\1" + MASK),
    ("telegram-token", (":aa",), re.compile(r"(?<![0-9])(\d{8,10}:)AA[A-Za-z0-9_-]{30,}"), r"\1" + MASK),
    # GitHub: classic (ghp_, gho_, ghu_, ghs_, ghr_) and fine-grained tokens.
    ("github-token", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), re.compile(r"\b(gh[pousr])_[A-Za-z0-9]{30,}"),
     r"\1_" + MASK),
    ("github-token", ("github_pat_",), re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}"), "github_pat_" + MASK),
    # Hugging Face user and org tokens.
    ("hf-token", ("hf_", "api_org_"), re.compile(r"\b(hf|api_org)_[A-Za-z0-9]{30,}"), r"\1_" + MASK),
    # Provider tokens recognised by their prefix (one pattern; each prefix is its own hint).
    ("provider-token", tuple(sorted({pre.lower() for _, pre, _ in _PREFIXED})),
     re.compile(r"(?<![A-Za-z0-9_-])(" + "|".join(f"{re.escape(pre)}(?={body})" for _, pre, body in
                                                    sorted(_PREFIXED, key=lambda t: -len(t[1])))
                + r")[A-Za-z0-9_.+/=-]+"),
     r"\1" + MASK),
    # Twilio account SID followed by its auth token (Client("AC…", "…")), and the SID itself.
    ("twilio-token", ("ac",), re.compile(r"\bAC[0-9a-f]{32}\b(['\"]?\s*[,:]\s*['\"]?)[0-9a-f]{32}\b"),
     "AC" + MASK + r"\1" + MASK),
    ("twilio-token", ("ac",), re.compile(r"\bAC[0-9a-f]{32}\b"), "AC" + MASK),
    # AWS access key ids; secret keys are caught here and by the key=value rule below.
    ("aws-key-id", ("akia", "asia", "abia", "acca"), re.compile(r"\b(AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b"),
     r"\1" + MASK),
    ("aws-secret", ("aws",),
     re.compile(r"(?i)(aws_?secret_?access_?key|aws_?session_?token)(['\"]?\s*[=:]\s*|\s+)" + _NOT_MASKED
                + r"['\"]?[A-Za-z0-9/+=]{16,}['\"]?"),
     r"\1\2" + MASK),
    # Azure storage / service bus connection strings and SAS signatures.
    ("azure-key", ("accountkey", "sharedaccesskey", "sig="),
     re.compile(r"(?i)\b(accountkey=|sharedaccesskey=|[?&]sig=)" + _NOT_MASKED + r"[^;&\s\"']{8,}"), r"\1" + MASK),
    # W&B: WANDB_API_KEY=<key> and `wandb login <key>`.
    ("wandb-key", ("wandb",),
     re.compile(r"(?i)(wandb[_-]?api[_-]?key)(['\"]?\s*[=:]\s*)['\"]?" + _NOT_MASKED + r"[A-Za-z0-9_-]{20,}['\"]?"),
     r"\1\2" + MASK),
    ("wandb-key", ("wandb",), re.compile(r"(?i)(wandb\s+login\s+(?:--relogin\s+)?)[0-9a-f]{40}\b"), r"\1" + MASK),
    # ~/.netrc: machine HOST login USER password SECRET (one line or several).
    ("netrc-password", ("machine",),
     re.compile(r"(?i)(\bmachine\s+\S+\s+login\s+\S+\s+password\s+)" + _NOT_MASKED + r"\S+"), r"\1" + MASK),
    # Bearer / basic auth headers (also as a Python dict or JSON entry), and JWTs wherever they appear.
    ("auth-header", ("authorization",),
     re.compile(r"(?i)\b((?:proxy-)?authorization['\"]?\s*[:=]\s*['\"]?(?:bearer|basic|token|digest)\s+)"
                + _NOT_MASKED + r"[A-Za-z0-9._~+/=-]{8,}"), r"\1" + MASK),
    ("auth-header", ("bearer",), re.compile(r"(?i)\b(bearer\s+)" + _NOT_MASKED + r"(?=[A-Za-z0-9._~+/=-]*[0-9])"
                                            r"[A-Za-z0-9._~+/=-]{20,}"), r"\1" + MASK),
    ("jwt", ("eyj",), re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), MASK),
    # user:password@ in URLs (database DSNs, git remotes, proxies), also with an empty user
    # (redis://:pw@host); a token as the whole userinfo of a Sentry DSN.
    ("url-password", ("://",), re.compile(r"\b([a-z][a-z0-9+.-]*://[^\s:/@]*:)" + _NOT_MASKED + r"[^\s@/]+@"),
     r"\1" + MASK + "@"),
    ("url-token", ("sentry",), re.compile(r"\b(https?://)[0-9a-f]{32}(@[\w.-]*sentry)"), r"\1" + MASK + r"\2"),
    # Docker config.json and Kaggle's kaggle.json: "auth" / "identitytoken" / a hex "key".
    ("docker-auth", ('"auth"', '"identitytoken"'),
     re.compile(r"(\"(?:auth|identitytoken)\"\s*:\s*\")" + _NOT_MASKED + r"[^\"\s]{8,}\""), r"\1" + MASK + '"'),
    ("json-key", ('"key"',), re.compile(r"(\"key\"\s*:\s*\")[0-9a-f]{32,}\""), r"\1" + MASK + '"'),
    # Passwords on command lines: mysql -pSECRET, docker login -p SECRET, curl -u user:SECRET.
    ("cli-password", ("mysql",), re.compile(r"(\bmysql(?:dump|admin|import|sh)?\b[^\n|;&]*?\s-p)" + _NOT_MASKED
                                            + r"([^\s\-][^\s]*)"), r"\1" + MASK),
    ("cli-password", ("docker", "podman", "helm", "login"),
     re.compile(r"(\b(?:docker|podman|helm\s+registry|skopeo|buildah|oras)\s+login\b[^\n|;&]*?\s-p\s+)" + _NOT_MASKED
                + r"\S+"), r"\1" + MASK),
    ("cli-password", ("curl", "wget"),
     re.compile(r"(\b(?:curl|wget)\b[^\n|;&]*?\s(?:-u\s*|--user[= ]|--proxy-user[= ])['\"]?[^\s:'\"]+:)" + _NOT_MASKED
                + r"[^\s'\"]+"), r"\1" + MASK),
    # *_PWD=… (MYSQL_PWD, DB_PWD); PWD=/home/x and OLDPWD stay (the shell's directories).
    ("env-secret", ("_pwd",), re.compile(r"(\b[A-Za-z][A-Za-z0-9]*_PWD\s*=\s*)" + _NOT_MASKED + r"(\"[^\"\n]*\"|'[^'\n]*'|\S+)"),
     r"\1" + MASK),
    # Env dumps and config: NAME=value where NAME ends in a secret-ish word, also JSON / Python dict
    # entries ("password": "…", 'api_key': '…'). The pattern starts at the word (fast to find); the
    # name before it stays. `max_tokens=512` survives (the word must be followed by = or :),
    # `PWD=/home/x` survives (the shell's cwd, not a password).
    ("env-secret", _KEYWORDS,
     re.compile(r"(?i)(password|passwd|passphrase|secret(?:_?key)?|api[_-]?key|access[_-]?key|"
                r"private[_-]?key|credentials?|auth[_-]?key)" + _SEP + _NOT_MASKED + _NOT_A_VALUE + _VALUE),
     r"\1\2\3" + MASK + r"\3"),
    # `token` too, but a number after it is a token id or count (`EOG token = 248065`, `startToken =
    # 0x3`), not a credential.
    ("env-secret", ("token",),
     re.compile(r"(?i)(token)" + _SEP + _NOT_MASKED + _NOT_A_VALUE + r"(?!(?:0x[0-9a-f]+|[0-9]{1,7})(?![^\s,;'\"}]))"
                + _VALUE),
     r"\1\2\3" + MASK + r"\3"),
    # Command-line flags: --password x, --token=x, --api-key x, --hf-token x, --wandb_token x. Not
    # `--max-num-batched-tokens 8192` (tokens), not `--pad-token 0` (a tokenizer's special token), not
    # a table rule of dashes ("---------Inter-token Latency-----", vLLM's benchmark): a flag starts a word.
    ("flag-secret", ("--",),
     re.compile(r"(?i)((?<![\w-])--(?!(?:pad|eos|bos|unk|sep|cls|mask)[-_]token\b)(?:[a-z0-9]+[-_])*"
                r"(?:password|passwd|pass|token|secret|api[-_]?key|apikey|access[-_]?key|auth[-_]?token|"
                r"private[-_]?key)(?:=|\s+))" + _NOT_MASKED + r"[^\s-][^\s]*"),
     r"\1" + MASK),
]
_ALL_HINTS = tuple(sorted({h for _, hints, _, _ in _RULES for h in hints}))
# Case-insensitive patterns are slow in `re` (0.4 s per 2 MB for the env rule); their lower-case
# twin runs on text.lower() instead (5x faster) and the original-case pattern only re-matches the hits.
_LOWER = {id(p): re.compile(p.pattern.removeprefix("(?i)"), p.flags & ~re.IGNORECASE)
          for _, _, p, _ in _RULES if p.flags & re.IGNORECASE}


def _subn(pattern: re.Pattern[str], repl: Any, text: str) -> tuple[str, int]:
    """Replace every match; count only the ones that removed something not redacted already (a
    value another rule masked, `GITHUB_TOKEN=ghp_[REDACTED]`, is one secret, not two)."""
    lower = _LOWER.get(id(pattern))
    low = text.lower() if lower is not None else text
    matches: Iterator[tuple[re.Match[str], re.Match[str] | None]]
    if lower is None or len(low) != len(text):  # no lower twin, or offsets would drift
        matches = ((m, m) for m in pattern.finditer(text))
    else:
        matches = ((m, pattern.fullmatch(text, *m.span())) for m in lower.finditer(low))
    out: list[str] = []
    pos = n = 0
    changed = False
    for m, orig in matches:
        if orig is None:
            continue
        start, end = m.span()
        new = repl(orig) if callable(repl) else orig.expand(repl)
        if new == orig.group(0):
            continue
        out.append(text[pos:start])
        out.append(new)
        pos, changed = end, True
        if MASK not in orig.group(0):
            n += 1
    if not changed:
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
        before = text
        text, n = _subn(pattern, repl, text)
        if text is not before:
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
