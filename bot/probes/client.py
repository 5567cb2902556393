"""Calls node agents on the hosts a failure implicates: in parallel, signed, each within a deadline.

An agent that does not answer is itself evidence ("gpu-node-17 did not answer in 3 s"): every host
gets a HostProbeReport, never an exception.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import ssl
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bot.probes.targets import MAX_HOSTS_PER_DIAGNOSIS, AllowList, TargetPolicy, resolve
from node_agent.auth import request_headers

MAX_PARALLEL = 256
MAX_ANSWER_BYTES = 16 * 1024 * 1024


class DirectoryError(ValueError):
    """The agent URL template or map file is unusable."""


@dataclass(frozen=True)
class AgentTLS:
    """How https:// agents are checked: a CA file (else the system's trust store), and optionally a client
    certificate for agents started with --tls-client-ca. From TRIAGE_AGENT_CA_FILE,
    TRIAGE_AGENT_CLIENT_CERT and TRIAGE_AGENT_CLIENT_KEY by default."""

    ca_file: str | None = None
    client_cert: str | None = None
    client_key: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> AgentTLS:
        env = os.environ if env is None else env
        return cls(*((env.get(k) or "").strip() or None for k in
                     ("TRIAGE_AGENT_CA_FILE", "TRIAGE_AGENT_CLIENT_CERT", "TRIAGE_AGENT_CLIENT_KEY")))

    @property
    def configured(self) -> bool:
        return bool(self.ca_file or self.client_cert or self.client_key)

    def context(self) -> ssl.SSLContext:
        """A verifying client context (host name checked against the certificate); errors name the file."""
        if self.client_key and not self.client_cert:
            raise DirectoryError("TRIAGE_AGENT_CLIENT_KEY needs TRIAGE_AGENT_CLIENT_CERT")
        try:
            ctx = ssl.create_default_context(cafile=self.ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise DirectoryError(f"cannot load the agent CA file {self.ca_file}: "
                                 f"{getattr(exc, 'strerror', None) or exc}") from None
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.client_cert:
            try:
                ctx.load_cert_chain(self.client_cert, self.client_key)
            except (OSError, ssl.SSLError) as exc:
                raise DirectoryError(f"cannot load the agent client certificate {self.client_cert}: "
                                     f"{getattr(exc, 'strerror', None) or exc}") from None
        return ctx


class AgentDirectory:
    """Host name -> agent base URL: a template such as `http://{host}:9477` (or one fixed URL), plus overrides."""

    def __init__(self, template: str, overrides: Mapping[str, str] | None = None,
                 allow: Iterable[str] | str | None = None, has_map: bool | None = None,
                 tls: AgentTLS | None = None) -> None:
        _check_url(template.replace("{host}", "host"), "agent URL template")
        tls = tls or AgentTLS.from_env()
        # Built once, here, so a bad CA or client certificate is an error at start, not per probe.
        self.ssl_context = tls.context() if tls.configured else None
        self.template = template
        self.overrides = dict(overrides or {})
        for host, url in self.overrides.items():
            _check_url(url, f"agent map entry for {host}")
        if allow is None:  # TRIAGE_AGENT_ALLOW: host globs and CIDRs, comma or space separated
            allow = os.environ.get("TRIAGE_AGENT_ALLOW")
        try:
            self.policy = TargetPolicy(AllowList(allow), self.overrides,
                                       bool(self.overrides) if has_map is None else has_map)
        except ValueError as exc:
            raise DirectoryError(str(exc)) from None

    @classmethod
    def from_files(cls, template: str, map_file: str | Path | None = None,
                   allow: Iterable[str] | str | None = None, tls: AgentTLS | None = None) -> AgentDirectory:
        """Template plus overrides from a YAML file of `host: url` lines; `allow`: TRIAGE_AGENT_ALLOW."""
        if map_file is None:
            return cls(template, allow=allow, tls=tls)
        import yaml  # bot side only: the agent itself stays stdlib

        try:
            data = yaml.safe_load(Path(map_file).read_text(encoding="utf-8")) or {}
        except OSError as exc:
            raise DirectoryError(f"cannot read agent map {map_file}: {exc.strerror}") from exc
        except yaml.YAMLError as exc:
            raise DirectoryError(f"agent map {map_file} is not valid YAML: {exc}") from exc
        if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
            raise DirectoryError(f"agent map {map_file} must be a mapping of host: url")
        return cls(template, {str(k): v for k, v in data.items()}, allow=allow, has_map=True, tls=tls)

    def refusal(self, host: str) -> str | None:
        """Why `host` must not be probed ("not probed: ..."), or None; checked before any URL is formed."""
        return self.policy.refusal(host)

    def templated(self, host: str) -> bool:
        """True when the host name chose the URL's address (template with {host}, no map entry)."""
        return not self.policy.is_mapped(host) and "{host}" in self.template

    def url_for(self, host: str) -> str:
        url = self.overrides.get(host) or self.overrides.get(host.split(".", 1)[0])
        if url:
            return url.rstrip("/")
        return self.template.replace("{host}", host).rstrip("/")


def _check_url(url: str, what: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise DirectoryError(f"{what} {url!r} is not an http(s):// URL")


@dataclass
class HostProbeReport:
    host: str
    url: str
    reachable: bool
    error: str | None = None
    latency_ms: int = 0
    answer: dict[str, Any] = field(default_factory=dict)  # the agent's JSON, as sent
    status: int | None = None  # HTTP status, when there was one
    probed: bool = True  # False: refused before any request (error says why)

    @property
    def results(self) -> list[dict[str, Any]]:
        return list(self.answer.get("results", []))

    @property
    def simulated(self) -> bool:
        return bool(self.answer.get("simulated"))

    def result(self, probe: str) -> dict[str, Any] | None:
        return next((r for r in self.results if r.get("probe") == probe), None)

    def findings(self) -> list[dict[str, Any]]:
        """Every finding, each tagged with the probe that made it."""
        return [{**f, "probe": r.get("probe")} for r in self.results for f in r.get("findings", [])]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"host": self.host, "results": []}
        out.update(self.answer)
        out.update({"reachable": self.reachable, "error": self.error, "url": self.url, "latency_ms": self.latency_ms})
        if not self.probed:
            out["probed"] = False
        return out


def not_probed(host: str, why: str) -> HostProbeReport:
    return HostProbeReport(host, "", False, why, probed=False)


def build_body(
    probes: Sequence[str] | None = None,
    gpus: Sequence[int | str] | None = None,
    window: tuple[float, float] | Mapping[str, float] | None = None,
    job_id: str | int | None = None,
    job_gpus: Sequence[int | str] | None = None,
    job_pids: Sequence[int] | None = None,
    deadline_s: float | None = None,
) -> bytes:
    body: dict[str, Any] = {}
    if probes:
        body["probes"] = list(probes)
    if gpus is not None:
        body["gpus"] = list(gpus)
    if window is not None:
        start, end = (window["start"], window["end"]) if isinstance(window, Mapping) else window
        body["window"] = {"start": float(start), "end": float(end)}
    if job_id is not None:
        body["job_id"] = str(job_id)
    if job_gpus is not None:
        body["job_gpus"] = list(job_gpus)
    if job_pids:
        body["job_pids"] = [int(p) for p in job_pids]
    if deadline_s is not None:
        body["deadline_s"] = round(deadline_s, 2)
    return json.dumps(body, separators=(",", ":")).encode()


def agent_budget(deadline_s: float) -> float:
    """What the agent is told it has: the caller's deadline less the network and signing margin."""
    return max(0.2, min(deadline_s - 0.3, deadline_s * 0.9))


def call_agent(host: str, url: str, secret: bytes, method: str, path: str, body: bytes,
               deadline_s: float, policy: TargetPolicy | None = None,
               context: ssl.SSLContext | None = None) -> HostProbeReport:
    """One signed request; every failure becomes an unreachable report with a sentence saying why.

    With `policy` (the URL came from the template and the host's name), every address the name
    resolves to is checked and the connection goes to the checked address (no second lookup).
    An https:// URL is verified with `context` (the directory's AgentTLS), else the system's CAs.
    """
    parts = urlsplit(url)
    started = time.monotonic()
    conn_cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    kwargs: dict[str, Any] = {"timeout": deadline_s}
    if parts.scheme == "https":
        kwargs["context"] = context or ssl.create_default_context()
    target = parts.hostname or host
    port = parts.port or (443 if parts.scheme == "https" else 80)
    conn = conn_cls(target, port, **kwargs)

    def fail(msg: str, status: int | None = None) -> HostProbeReport:
        return HostProbeReport(host, url, False, msg, int((time.monotonic() - started) * 1000), status=status)

    try:
        if policy is not None:
            try:
                addrs = resolve(target, port)
            except (OSError, UnicodeError):
                return fail(f"{host}: cannot resolve {target}")
            for addr, _ in addrs:
                why = policy.address_refusal(host, addr)
                if why:
                    return HostProbeReport(host, url, False, why, probed=False)
            if not addrs:
                return fail(f"{host}: cannot resolve {target}")
            pinned = addrs[0][1]
            conn._create_connection = (  # type: ignore[attr-defined]
                lambda _addr, timeout=None, source_address=None: socket.create_connection(
                    pinned[:2], timeout, source_address))
        full_path = (parts.path.rstrip("/") + path) or path
        headers = {"Content-Type": "application/json",
                   **request_headers(secret, method, full_path, target, body)}
        conn.request(method, full_path, body=body if method == "POST" else None, headers=headers)
        resp = conn.getresponse()
        raw = resp.read(MAX_ANSWER_BYTES + 1)
    except TimeoutError:
        return fail(f"{host} did not answer in {deadline_s:g} s")
    except ConnectionRefusedError:
        return fail(f"{host} refused the connection at {url} (agent not running?)")
    except socket.gaierror:
        return fail(f"{host}: cannot resolve {parts.hostname}")
    except ssl.SSLCertVerificationError as exc:
        return fail(f"{host} at {url}: the agent's TLS certificate was not accepted "
                    f"({exc.verify_message or exc.reason}; check TRIAGE_AGENT_CA_FILE)")
    except ssl.SSLError as exc:
        return fail(f"{host} at {url}: TLS failed ({exc.reason or exc}; an agent started with "
                    "--tls-client-ca needs TRIAGE_AGENT_CLIENT_CERT)")
    except (OSError, http.client.HTTPException) as exc:
        return fail(f"{host} unreachable at {url}: {getattr(exc, 'strerror', None) or exc}")
    finally:
        conn.close()
    latency = int((time.monotonic() - started) * 1000)
    try:
        data = json.loads(raw) if len(raw) <= MAX_ANSWER_BYTES else None
    except ValueError:
        data = None
    if resp.status != 200:
        detail = data.get("detail") if isinstance(data, dict) else None
        what = {
            401: "rejected the request (check the shared secret and the clocks)"
                 + ("" if resp.getheader("X-Triage-Auth") else "; the agent may predate signature scheme v2: "
                    "upgrade node-agent"),
            413: "refused the request as too large",
            503: "is busy",
        }.get(resp.status, f"answered HTTP {resp.status}")
        return fail(f"{host} {what}" + (f": {detail}" if detail else ""), resp.status)
    if not isinstance(data, dict):
        return fail(f"{host} answered with something that is not a JSON report", resp.status)
    return HostProbeReport(host, url, True, None, latency, data, resp.status)


def probe_hosts(
    directory: AgentDirectory,
    hosts: Iterable[str],
    secret: bytes | str,
    probes: Sequence[str] | None = None,
    gpus_by_host: Mapping[str, Sequence[int | str]] | None = None,
    window: tuple[float, float] | Mapping[str, float] | None = None,
    job_id: str | int | None = None,
    job_gpus_by_host: Mapping[str, Sequence[int | str]] | None = None,
    job_pids_by_host: Mapping[str, Sequence[int]] | None = None,
    deadline_s: float = 3.0,
    max_hosts: int = MAX_HOSTS_PER_DIAGNOSIS,
) -> dict[str, HostProbeReport]:
    """Probe every allowed host at once; each answers within deadline_s or is reported unreachable.

    A host refused by the directory's policy, or beyond the first `max_hosts`, gets a report with
    `probed=False` and "not probed: <why>" and no request is made for it.
    """
    key = secret.encode() if isinstance(secret, str) else secret
    names = list(dict.fromkeys(hosts))
    refused: dict[str, HostProbeReport] = {}
    allowed: list[str] = []
    for h in names:
        why = directory.refusal(h) if hasattr(directory, "refusal") else None
        if why:
            refused[h] = not_probed(h, why)
        elif len(allowed) >= max_hosts:
            refused[h] = not_probed(h, f"not probed: only the first {max_hosts} hosts of one request are probed")
        else:
            allowed.append(h)
    hosts = allowed
    if not hosts:
        return {h: refused[h] for h in names}
    budget = agent_budget(deadline_s)

    def one(host: str) -> HostProbeReport:
        body = build_body(probes, (gpus_by_host or {}).get(host), window, job_id, (job_gpus_by_host or {}).get(host),
                          (job_pids_by_host or {}).get(host), budget)
        policy = directory.policy if getattr(directory, "templated", lambda _h: False)(host) else None
        return call_agent(host, directory.url_for(host), key, "POST", "/v1/probe", body, deadline_s, policy,
                          getattr(directory, "ssl_context", None))

    reports: dict[str, HostProbeReport] = {}
    pool = ThreadPoolExecutor(max_workers=min(len(hosts), MAX_PARALLEL), thread_name_prefix="probe")
    try:
        futures = {pool.submit(one, h): h for h in hosts}
        # Each call carries its own socket timeout; this outer wait bounds connect + send + read together.
        rounds = -(-len(hosts) // MAX_PARALLEL)
        done, _ = wait(futures, timeout=deadline_s * rounds + 0.5)
        for fut, host in futures.items():
            if fut in done and fut.exception() is None:
                reports[host] = fut.result()
            elif fut in done:
                reports[host] = HostProbeReport(host, directory.url_for(host), False, f"{host}: {fut.exception()}")
            else:
                reports[host] = HostProbeReport(host, directory.url_for(host), False,
                                                f"{host} did not answer in {deadline_s:g} s", int(deadline_s * 1000))
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    reports.update(refused)
    return {h: reports[h] for h in names}


def fetch_catalogue(directory: AgentDirectory, host: str, secret: bytes | str, deadline_s: float = 3.0) -> HostProbeReport:
    """GET /v1/probes: which probes the agent offers and what each needs."""
    key = secret.encode() if isinstance(secret, str) else secret
    why = directory.refusal(host)
    if why:
        return not_probed(host, why)
    policy = directory.policy if directory.templated(host) else None
    return call_agent(host, directory.url_for(host), key, "GET", "/v1/probes", b"", deadline_s, policy,
                      directory.ssl_context)
