"""Scenarios: JSON files that drive the fake NVML and lay out a fixture root for /proc, /sys and the kernel log.

A scenario is found by path, or by name in $NODE_AGENT_SCENARIO_PATH (colon-separated directories)
and then in the built-in node_agent/scenarios/. `"extends": "<name>"` starts from another scenario;
`"gpu_overrides": {"3": {...}, "*": {...}}` patches GPUs of the result. See docs/node-agent.md.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from node_agent.bundled import data_dir
from node_agent.hostenv import HostEnv

BUILTIN_DIR = data_dir("scenarios")
GIB = 1024**3


class ScenarioError(Exception):
    pass


def scenario_dirs() -> list[Path]:
    extra = [Path(p) for p in os.environ.get("NODE_AGENT_SCENARIO_PATH", "").split(os.pathsep) if p]
    return [*extra, BUILTIN_DIR]


def list_scenarios() -> list[str]:
    names: dict[str, None] = {}
    for d in scenario_dirs():
        if d.is_dir():
            for p in sorted(d.glob("*.json")):
                names.setdefault(p.stem, None)
    return list(names)


def find_scenario(name_or_path: str) -> Path:
    p = Path(name_or_path)
    if p.suffix == ".json" or os.sep in name_or_path:
        if p.is_file():
            return p
        raise ScenarioError(f"scenario file {name_or_path} not found")
    for d in scenario_dirs():
        cand = d / f"{name_or_path}.json"
        if cand.is_file():
            return cand
    raise ScenarioError(f"unknown scenario {name_or_path!r}; known: {', '.join(list_scenarios())}")


def _merge(base: Any, over: Any) -> Any:
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = _merge(base.get(k), v) if k in base else copy.deepcopy(v)
        return out
    return copy.deepcopy(over)


def _load_raw(name_or_path: str, chain: tuple[str, ...]) -> dict[str, Any]:
    """The scenario merged over its `extends` chain; GPU defaults and overrides not applied yet."""
    path = find_scenario(name_or_path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ScenarioError(f"scenario {path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ScenarioError(f"scenario {path} must hold a JSON object")
    data.setdefault("name", path.stem)
    data["_dir"] = str(path.parent)
    overrides = [data.pop("gpu_overrides", {})]
    parent = data.pop("extends", None)
    if parent:
        if parent in chain:
            raise ScenarioError(f"scenario {path}: extends loop through {parent}")
        base = _load_raw(parent, (*chain, data["name"]))
        base.pop("description", None)
        overrides = base.pop("_overrides") + overrides
        data = _merge(base, data)
    data["_overrides"] = overrides
    return data


def load_scenario(name_or_path: str) -> dict[str, Any]:
    """A scenario ready to run: extends resolved, gpu_defaults merged into every GPU, then gpu_overrides."""
    data = _load_raw(name_or_path, ())
    nvml = data.setdefault("nvml", {})
    defaults = nvml.pop("gpu_defaults", {})
    gpus = [_merge(defaults, g) for g in nvml.get("gpus", [])]
    for patch in data.pop("_overrides"):
        for key, change in patch.items():
            targets = range(len(gpus)) if key == "*" else [int(key)]
            for i in targets:
                if not 0 <= i < len(gpus):
                    raise ScenarioError(f"scenario {data['name']}: gpu_overrides names GPU {i}, which does not exist")
                gpus[i] = _merge(gpus[i], change)
    nvml["gpus"] = gpus
    return data


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _bytes(fig: dict[str, Any], key: str) -> int:
    if f"{key}_bytes" in fig:
        return int(fig[f"{key}_bytes"])
    return int(float(fig.get(f"{key}_gib", 0)) * GIB)


def build_fixture_root(scenario: dict[str, Any], start_time: float, root: Path) -> None:
    """Lay out proc/, sys/, etc/ and dev/kmsg under root, as the real files look."""
    host = scenario.get("host", {})
    boot = start_time - float(host.get("uptime_s", 86400))
    _write(root / "proc" / "stat", f"cpu  0 0 0 0 0 0 0 0 0 0\nbtime {int(boot)}\n")
    _write(root / "proc" / "uptime", f"{start_time - int(boot):.2f} 0.00\n")
    mem = host.get("memory", {"total_gib": 2015, "available_gib": 1890})
    _write(root / "proc" / "meminfo",
           f"MemTotal:       {int(mem['total_gib'] * GIB / 1024)} kB\n"
           f"MemFree:        {int(mem['available_gib'] * GIB / 1024)} kB\n"
           f"MemAvailable:   {int(mem['available_gib'] * GIB / 1024)} kB\n")
    if host.get("driver_version_file"):
        _write(root / "proc" / "driver" / "nvidia" / "version", host["driver_version_file"] + "\n")
    for pid, p in host.get("procs", {}).items():
        base = root / "proc" / str(pid)
        uid = int(p.get("uid", 0))
        _write(base / "comm", p.get("comm", "unknown") + "\n")
        _write(base / "status", f"Name:\t{p.get('comm', 'unknown')}\nState:\tS (sleeping)\nPid:\t{pid}\n"
                                f"PPid:\t{p.get('ppid', 1)}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
        _write(base / "cgroup", p.get("cgroup", "0::/") + "\n")
        _write(base / "cmdline", "\0".join(p.get("cmdline", p.get("comm", "")).split()) + "\0")
    users = {"0": "root", **{str(k): v for k, v in host.get("users", {}).items()}}
    _write(root / "etc" / "passwd", "".join(f"{n}:x:{u}:{u}::/home/{n}:/bin/bash\n" for u, n in users.items()))
    for dev, d in host.get("infiniband", {}).items():
        ddir = root / "sys" / "class" / "infiniband" / dev
        for key in ("fw_ver", "board_id", "hca_type", "node_guid"):
            if key in d:
                _write(ddir / key, str(d[key]) + "\n")
        for port, p in d.get("ports", {}).items():
            pdir = ddir / "ports" / str(port)
            for key in ("state", "phys_state", "rate", "link_layer", "lid", "sm_lid"):
                if key in p:
                    _write(pdir / key, str(p[key]) + "\n")
            for name, value in p.get("counters", {}).items():
                _write(pdir / "counters" / name, f"{value}\n")
    (root / "sys" / "class" / "infiniband").mkdir(parents=True, exist_ok=True)
    records = []
    for seq, rec in enumerate(sorted(host.get("kmsg", []), key=lambda r: r["t"])):
        usec = int((start_time + float(rec["t"]) - int(boot)) * 1e6)
        records.append(f"{int(rec.get('prio', 3))},{seq},{max(usec, 0)},-;{rec['text']}\n")
    _write(root / "dev" / "kmsg", "".join(records))
    extra = Path(scenario.get("_dir", ".")) / f"{scenario['name']}.d"
    if extra.is_dir():  # a user's own fixture tree, copied over the generated one
        shutil.copytree(extra, root, dirs_exist_ok=True)


@dataclass
class SimulatedHost:
    scenario: dict[str, Any]
    root: Path
    scenario_file: Path
    env: HostEnv

    @classmethod
    def create(cls, name_or_path: str, start_time: float) -> SimulatedHost:
        scenario = load_scenario(name_or_path)
        root = Path(tempfile.mkdtemp(prefix=f"node-agent-{scenario['name']}-"))
        build_fixture_root(scenario, start_time, root)
        scenario_file = root / "scenario.json"
        scenario_file.write_text(json.dumps(scenario), encoding="utf-8")
        host = scenario.get("host", {})
        env = HostEnv(
            proc_root=root / "proc", sys_root=root / "sys", etc_root=root / "etc", kmsg_path=root / "dev" / "kmsg",
            log_root=root / "var" / "log", simulated=True,
            fs_table={path: {"total_bytes": _bytes(f, "total"), "used_bytes": _bytes(f, "used")}
                      for path, f in host.get("fs", {}).items()},
            services=host.get("services"),
        )
        return cls(scenario, root, scenario_file, env)

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
