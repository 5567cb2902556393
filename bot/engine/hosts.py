"""What kind of name a log gives a host, so the probe client knows whether the name alone reaches
an agent: a node name or address does; a container id, pod name or UUID needs the agent map."""

from __future__ import annotations

import re

_CONTAINER_ID = re.compile(r"[0-9a-f]{12}|[0-9a-f]{64}")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I)
# Deployment/ReplicaSet pods ("trainer-7d9f8b6c5d-x2k4p"), and the job operators' pods
# ("llama-pytorchjob-worker-3", "mpijob-launcher-abcde", "ray-head-7zq9k", "jobset-w-0-1-xyz12")
_POD = re.compile(
    r"[a-z0-9][a-z0-9\-]*-[a-z0-9]{8,10}-[a-z0-9]{5}"
    r"|[a-z0-9][a-z0-9\-]*-(?:worker|master|launcher|chief|ps|evaluator|head)-(?:\d+|[a-z0-9]{5})",
)
_IP = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}|[0-9a-fA-F]*:[0-9a-fA-F:.]+")


def host_kind(host: str) -> str:
    """`node`, `address`, `container`, `pod` or `uuid`."""
    if _IP.fullmatch(host):
        return "address"
    if _CONTAINER_ID.fullmatch(host) and re.search(r"\d", host) and re.search(r"[a-f]", host):
        return "container"
    if _UUID.fullmatch(host):
        return "uuid"
    if _POD.fullmatch(host):
        return "pod"
    return "node"


def why_not_reachable(host: str) -> str | None:
    """None when the name itself can reach the host's agent; else why it cannot, and what to do."""
    kind = host_kind(host)
    if kind == "container":
        return (f"not probed: {host} looks like a container id, not a node; map it to its node's agent "
                "in the agent map (TRIAGE_AGENT_MAP / --agent-map) to probe it")
    if kind == "pod":
        return (f"not probed: {host} looks like a Kubernetes pod name; `kubectl get pod {host} -o wide` shows "
                "its node; map it in the agent map (TRIAGE_AGENT_MAP / --agent-map) to probe it")
    if kind == "uuid":
        return f"not probed: {host} is a UUID, not a host name; map it in the agent map to probe it"
    return None
