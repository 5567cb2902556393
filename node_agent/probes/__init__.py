"""The probe registry: names here are what the signature library's `probes:` lists refer to."""

from __future__ import annotations

from node_agent.probes import ecc, fabric, host, infiniband, inventory, nvlink, pcie, processes, thermal, xid
from node_agent.probes.base import Probe

# Explicit, ordered: the order of results in an answer (cheap host-file probes last).
REGISTRY: dict[str, Probe] = {
    p.name: p
    for p in (
        inventory.PROBE,
        processes.PROBE,
        ecc.PROBE,
        xid.PROBE,
        thermal.PROBE,
        pcie.PROBE,
        nvlink.PROBE,
        fabric.PROBE,
        infiniband.PROBE,
        host.PROBE,
    )
}

PROBE_NAMES: list[str] = list(REGISTRY)
