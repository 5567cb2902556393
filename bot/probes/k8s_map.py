"""Kubernetes: keep an agent map of pod name -> the node agent of the pod's node, for logs that name pods.

    python3 -m bot.probes.k8s_map --out /var/run/gpu-triage/agents.yaml [--interval 30] [--port 9477]

Runs as a sidecar of the bot (deploy/k8s/bot-deployment.yaml) with a service account that may only
list pods. Every interval it lists the running pods (in-cluster API: the service account token and
CA the kubelet mounts), and writes `pod: http://<hostIP>:9477` lines, plus `node: url` for each node
name, atomically (rename), so the bot (TRIAGE_AGENT_MAP, re-read when the file changes) probes the
agent on the node a pod ran on. Standard library only; the YAML written is a flat mapping.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import logging
import os
import re
import ssl
import sys
import time
import urllib.request
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger("bot.probes.k8s_map")
SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")  # RFC 1123 (pod and node names)


def agent_map(pods: Iterable[Mapping[str, Any]], port: int = 9477, scheme: str = "http") -> dict[str, str]:
    """pod name (and node name) -> agent URL of its node, for pods scheduled on a node with an address.

    A pod name found in two namespaces on different nodes is ambiguous: left out (probing the wrong
    node would be worse than saying "not probed").
    """
    out: dict[str, str] = {}
    clash: set[str] = set()
    for pod in pods:
        name = str(pod.get("metadata", {}).get("name", ""))
        node = str(pod.get("spec", {}).get("nodeName", "") or "")
        ip = str(pod.get("status", {}).get("hostIP", "") or "")
        if not (_NAME.match(name) and node and _NAME.match(node)):
            continue
        try:
            addr = ipaddress.ip_address(ip)
        except ValueError:
            continue
        host = f"[{addr}]" if addr.version == 6 else str(addr)
        url = f"{scheme}://{host}:{port}"
        for key in (name, node):
            if out.get(key, url) != url:
                clash.add(key)
            out[key] = url
    for key in clash:
        out.pop(key, None)
    return out


def render(mapping: Mapping[str, str]) -> str:
    # names are RFC 1123 and URLs are scheme://ip:port: plain YAML scalars, no quoting needed
    head = "# written by bot.probes.k8s_map: pod or node name -> node agent (do not edit)\n"
    return head + "".join(f"{k}: {v}\n" for k, v in sorted(mapping.items()))


def write_atomically(path: Path, text: str) -> bool:
    """Replace `path` with `text` unless it already says that; True when it changed."""
    try:
        if path.read_text(encoding="utf-8") == text:
            return False
    except OSError:
        pass
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return True


def list_pods(api: str, token: str, ca_file: str | None, timeout: float = 10.0) -> list[dict[str, Any]]:
    url = api.rstrip("/") + "/api/v1/pods?fieldSelector=status.phase%3DRunning"
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}", "Accept": "application/json"})
    ctx = ssl.create_default_context(cafile=ca_file) if url.startswith("https") else None
    with urllib.request.urlopen(req, timeout=timeout, context=ctx) as resp:
        doc = json.loads(resp.read().decode("utf-8"))
    items = doc.get("items") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        raise ValueError("the API answered without an items list")
    return items


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m bot.probes.k8s_map", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="agent map file to keep up to date")
    ap.add_argument("--interval", type=float, default=30.0, help="seconds between refreshes (default 30)")
    ap.add_argument("--port", type=int, default=9477, help="the agents' hostPort (default 9477)")
    ap.add_argument("--scheme", choices=("http", "https"), default="http")
    ap.add_argument("--once", action="store_true", help="write once and exit")
    ap.add_argument("--api", default=None, help="API server URL (default: in-cluster, from KUBERNETES_SERVICE_*)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    api = args.api or "https://{}:{}".format(os.environ.get("KUBERNETES_SERVICE_HOST", "kubernetes.default.svc"),
                                             os.environ.get("KUBERNETES_SERVICE_PORT", "443"))
    token_file = Path(os.environ.get("K8S_MAP_TOKEN_FILE", SA_DIR / "token"))
    ca = os.environ.get("K8S_MAP_CA_FILE", str(SA_DIR / "ca.crt"))
    while True:
        try:
            token = token_file.read_text(encoding="utf-8").strip()  # re-read: projected tokens rotate
            mapping = agent_map(list_pods(api, token, ca if Path(ca).is_file() else None), args.port, args.scheme)
            if write_atomically(args.out, render(mapping)):
                log.info("agent map %s: %d names", args.out, len(mapping))
        except (OSError, ValueError) as exc:  # keep the last good map; say why this round failed
            log.warning("agent map not refreshed: %s", exc)
            if args.once:
                return 1
        if args.once:
            return 0
        time.sleep(args.interval)


if __name__ == "__main__":
    sys.exit(main())
