"""Command outputs pasted into a thread (or found in a log) read as probe answers.

The bot asks for `nvidia-smi`, `dmesg`, `df -h /dev/shm`...; when someone pastes the output, each
parser here turns it into results of the node agent's shape (`probe`, `health`, `findings` with the
agent's finding codes), marked `"source": "pasted"`, so the signatures' `finding:` and `probe_ok:`
conditions confirm and rule out causes with them exactly as with an agent's answer.

One module per command, listed in PARSERS (the explicit registry). Each has KIND (the command as
the answer names it), PROBES (the probe names its results use), ANSWERS (which commands in a
question its output answers), `find(lines)` -> [(first, last, data)] and `results(block, job)`.
Finding a block needs only its text; judging it (whose process is foreign) needs the whole
incident, so `answers()` runs once the report knows the job's pids, GPUs and hosts.
"""

from __future__ import annotations

import re
from typing import Any

from . import df, free, ibstat, kernel_log, nvidia_smi, nvidia_smi_q, ulimit
from .base import PROMPT, SOURCE, Block, JobView, pci_key

PARSERS = (nvidia_smi, nvidia_smi_q, kernel_log, ibstat, df, ulimit, free)
PASTED_CODES = ulimit.CODES  # finding codes only pasted outputs give (no agent probe reads them)
SCAN_MAX_BYTES = 4 << 20  # sources larger than this are logs, not pastes: not searched for outputs

# cheap markers before any parser runs: most sources hold no command output at all
_MARKERS = re.compile(r"NVIDIA-SMI|NVSMI LOG|^GPU [0-9A-F]{4,8}:|used_(?:gpu_)?memory|NVRM|kernel:|^\[\s*\d+\.\d+\]|"
                      r"^CA '|Infiniband device '|^Filesystem\s|open files|file descriptors|Max open files|"
                      r"locked memory|^\s+total\s+used\s+free|^kern\s*:", re.MULTILINE)
_HOST_WORD = re.compile(r"\b[A-Za-z][\w-]*\d[\w-]*(?:\.[\w-]+)*\b")


def find_outputs(source: str, text: str) -> list[Block]:
    """Every command output the parsers recognise in one source, in line order."""
    if len(text) > SCAN_MAX_BYTES or not _MARKERS.search(text):
        return []
    lines = text.splitlines()
    out: list[Block] = []
    for parser in PARSERS:
        try:
            found = parser.find(lines)
        except Exception:  # noqa: BLE001 - an odd paste must never cost the diagnosis (tests pin each parser)
            continue
        for first, last, data in found:
            host = data.pop("host", None) if parser is kernel_log else None
            out.append(Block(parser.KIND, source, first + 1, last + 1, data, host or _prompt_host(lines, first),
                             lines[max(0, first - 3):first]))
    return sorted(out, key=lambda b: b.line)


def _prompt_host(lines: list[str], first: int) -> str | None:
    """The host a shell prompt names on the command's line, just above its output."""
    for i in range(first, max(-1, first - 4), -1):
        m = PROMPT.match(lines[i])
        if m:
            return m.group("host")
    return None


def _hint_host(lines_before: list[str], known: set[str]) -> str | None:
    for line in reversed(lines_before):
        for w in _HOST_WORD.findall(line):
            if w in known:
                return w
    return None


def answers(blocks: list[Block], job_pids: set[int], job_gpus: dict[str, set[int]], default_host: str | None,
            known_hosts: set[str]) -> dict[str, dict[str, Any]]:
    """The pasted outputs as agent answers, one per host: {host: {"host", "source", "results"}}.

    A block's host is the one its prompt or its lines name, else the initiating host, else the
    incident's only host. Of two outputs for the same probe and host, the later one (the newer
    reply, the edited message) stands."""
    bus_map: dict[tuple[str | None, str], int] = {}
    for b in blocks:
        if b.kind in (nvidia_smi.KIND, nvidia_smi_q.KIND):
            gpus = b.data["gpus"].values() if isinstance(b.data["gpus"], dict) else b.data["gpus"]
            for g in gpus:
                if g.get("gpu") is not None and g.get("bus_id"):
                    bus_map[(b.host, pci_key(g["bus_id"]))] = g["gpu"]
    by_host: dict[str, dict[str, dict[str, Any]]] = {}
    for b in blocks:
        host = b.host or _hint_host(b.before, known_hosts) or default_host or "(host not named)"
        parser = next(p for p in PARSERS if p.KIND == b.kind)
        job = JobView(host, set(job_pids), set(job_gpus.get(host, set())))
        try:
            got = parser.results(b, job)
        except Exception:  # noqa: BLE001 - as in find_outputs
            continue
        for res in got:
            for f in res["findings"]:
                if f.get("gpu") is None and f.get("pci"):
                    f["gpu"] = bus_map.get((b.host, pci_key(f["pci"])), bus_map.get((None, pci_key(f["pci"]))))
                f["source"] = SOURCE
                f["pasted"] = {"command": b.kind, "source": b.source, "line": b.line}
            res["pasted"] = b.to_dict() | {"host": host}
            by_host.setdefault(host, {})[res["probe"]] = res
    return {h: {"host": h, "source": SOURCE, "reachable": True, "simulated": False, "results": list(r.values())}
            for h, r in by_host.items()}


_BACKTICKS = re.compile(r"`([^`]+)`")


def commands_answered(question: str, kinds: set[str]) -> bool:
    """Whether pasted outputs answer a question: it names (in backticks) at least one command a
    parser reads, and the output of every such command was pasted (`nvidia-smi` and `dmesg` both,
    when it asks for both). Commands no parser reads (`ls -laS /dev/shm | head`) do not count."""
    wanted = set()
    for cmd in _BACKTICKS.findall(question):
        for part in re.split(r"\s*(?:;|&&)\s*", cmd.strip()):
            part = part.split("|")[0].strip()
            kind = next((p.KIND for p in PARSERS if p.ANSWERS.search(part)), None)
            if kind is not None:
                wanted.add(kind)
    return bool(wanted) and wanted <= kinds


__all__ = ["PARSERS", "PASTED_CODES", "SOURCE", "Block", "answers", "commands_answered", "find_outputs"]
