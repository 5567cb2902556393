"""Calls node agents on the hosts a failure implicates: in parallel, signed, each within a deadline.

An agent that does not answer is itself evidence ("gpu-node-17 did not answer in 3 s"): every host
gets a HostProbeReport, never an exception.
"""

from __future__ import annotations

import http.client
import json
import secrets
import socket
import ssl
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from node_agent.auth import signed_headers

MAX_PARALLEL = 256
MAX_ANSWER_BYTES = 16 * 1024 * 1024


class DirectoryError(ValueError):
    """The agent URL template or map file is unusable."""


class AgentDirectory:
    """Host name -> agent base URL: a template such as `http://{host}:9477` (or one fixed URL), plus overrides."""

    def __init__(self, template: str, overrides: Mapping[str, str] | None = None) -> None:
        _check_url(template.replace("{host}", "host"), "agent URL template")
        self.template = template
        self.overrides = dict(overrides or {})
        for host, url in self.overrides.items():
            _check_url(url, f"agent map entry for {host}")

    @classmethod
    def from_files(cls, template: str, map_file: str | Path | None = None) -> AgentDirectory:
        """Template plus overrides from a YAML file of `host: url` lines."""
        if map_file is None:
            return cls(template)
        import yaml  # bot side only: the agent itself stays stdlib

        try:
            data = yaml.safe_load(Path(map_file).read_text(encoding="utf-8")) or {}
        except OSError as exc:
            raise DirectoryError(f"cannot read agent map {map_file}: {exc.strerror}") from exc
        except yaml.YAMLError as exc:
            raise DirectoryError(f"agent map {map_file} is not valid YAML: {exc}") from exc
        if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
            raise DirectoryError(f"agent map {map_file} must be a mapping of host: url")
        return cls(template, {str(k): v for k, v in data.items()})

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
        return out


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
    body["nonce"] = secrets.token_hex(8)  # identical requests in one second must not look like replays
    return json.dumps(body, separators=(",", ":")).encode()


def agent_budget(deadline_s: float) -> float:
    """What the agent is told it has: the caller's deadline less the network and signing margin."""
    return max(0.2, min(deadline_s - 0.3, deadline_s * 0.9))


def call_agent(host: str, url: str, secret: bytes, method: str, path: str, body: bytes,
               deadline_s: float) -> HostProbeReport:
    """One signed request; every failure becomes an unreachable report with a sentence saying why."""
    parts = urlsplit(url)
    started = time.monotonic()
    conn_cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    kwargs: dict[str, Any] = {"timeout": deadline_s}
    if parts.scheme == "https":
        kwargs["context"] = ssl.create_default_context()
    conn = conn_cls(parts.hostname or host, parts.port or (443 if parts.scheme == "https" else 80), **kwargs)

    def fail(msg: str, status: int | None = None) -> HostProbeReport:
        return HostProbeReport(host, url, False, msg, int((time.monotonic() - started) * 1000), status=status)

    try:
        headers = {"Content-Type": "application/json", **signed_headers(secret, body)}
        conn.request(method, (parts.path.rstrip("/") + path) or path, body=body if method == "POST" else None,
                     headers=headers)
        resp = conn.getresponse()
        raw = resp.read(MAX_ANSWER_BYTES + 1)
    except TimeoutError:
        return fail(f"{host} did not answer in {deadline_s:g} s")
    except ConnectionRefusedError:
        return fail(f"{host} refused the connection at {url} (agent not running?)")
    except socket.gaierror:
        return fail(f"{host}: cannot resolve {parts.hostname}")
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
            401: "rejected the request (check the shared secret and the clocks)",
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
) -> dict[str, HostProbeReport]:
    """Probe every host at once; each answers within deadline_s or is reported unreachable."""
    key = secret.encode() if isinstance(secret, str) else secret
    hosts = list(dict.fromkeys(hosts))
    if not hosts:
        return {}
    budget = agent_budget(deadline_s)

    def one(host: str) -> HostProbeReport:
        body = build_body(probes, (gpus_by_host or {}).get(host), window, job_id, (job_gpus_by_host or {}).get(host),
                          (job_pids_by_host or {}).get(host), budget)
        return call_agent(host, directory.url_for(host), key, "POST", "/v1/probe", body, deadline_s)

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
    return {h: reports[h] for h in hosts}


def fetch_catalogue(directory: AgentDirectory, host: str, secret: bytes | str, deadline_s: float = 3.0) -> HostProbeReport:
    """GET /v1/probes: which probes the agent offers and what each needs."""
    key = secret.encode() if isinstance(secret, str) else secret
    return call_agent(host, directory.url_for(host), key, "GET", "/v1/probes", b"", deadline_s)
