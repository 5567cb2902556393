"""Who owns a process: Slurm job or container, from /proc/<pid>/cgroup (world-readable, no privilege)."""

from __future__ import annotations

import re
from dataclasses import dataclass

# cgroup v2: 0::/system.slice/slurmstepd.scope/job_1234/step_0/user/task_0
# cgroup v1: 4:devices:/slurm/uid_1000/job_1234/step_0
_SLURM_RE = re.compile(r"/job_(\d+)(?:/step_([\w.]+))?")
# docker-<64 hex>.scope, /docker/<id>, cri-containerd-<id>.scope, crio-<id>.scope, kubepods/.../<id>
_CONTAINER_RE = re.compile(r"(?:docker-|cri-containerd-|crio-|libpod-|/docker/|/kubepods[^\n]*/)([0-9a-f]{64})")
_POD_RE = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")


@dataclass(frozen=True)
class Owner:
    kind: str  # "slurm" | "container" | "systemd" | "unknown"
    slurm_job: str | None = None
    slurm_step: str | None = None
    container_id: str | None = None
    pod_uid: str | None = None
    cgroup: str | None = None

    def label(self) -> str:
        if self.kind == "slurm":
            return f"slurm job {self.slurm_job}"
        if self.kind == "container":
            return f"container {self.container_id[:12] if self.container_id else '?'}"
        if self.kind == "systemd" and self.cgroup:
            return f"systemd {self.cgroup.rsplit('/', 1)[-1]}"
        return "unknown"


def owner_from_cgroup(text: str | None) -> Owner:
    if not text:
        return Owner("unknown")
    paths = [line.split(":", 2)[2] for line in text.splitlines() if line.count(":") >= 2]
    for path in paths:
        m = _SLURM_RE.search(path)
        if m:
            return Owner("slurm", slurm_job=m.group(1), slurm_step=m.group(2), cgroup=path)
    for path in paths:
        m = _CONTAINER_RE.search(path)
        if m:
            pod = _POD_RE.search(path)
            return Owner("container", container_id=m.group(1), cgroup=path,
                         pod_uid=pod.group(1).replace("_", "-") if pod else None)
    for path in paths:
        if path.endswith((".service", ".scope")):
            return Owner("systemd", cgroup=path)
    return Owner("unknown", cgroup=paths[0] if paths else None)
