"""Agent configuration: defaults < JSON config file < NODE_AGENT_* environment < command line.

Every field can be set in the JSON file under its own name, or as NODE_AGENT_<NAME> in the
environment (lists comma-separated). Unknown keys in the file are an error, so a typo cannot
silently leave a default in place.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from typing import Any

from node_agent.digits import is_ascii_uint

DEFAULT_PORT = 9477


class ConfigError(Exception):
    pass


@dataclass
class AgentConfig:
    listen: str = f"0.0.0.0:{DEFAULT_PORT}"
    secret_file: str | None = None
    simulate: str | None = None  # scenario name or path: fake NVML + fixture root
    name: str | None = None  # host name reported in answers (default: this host's name)
    max_body_bytes: int = 64 * 1024
    max_concurrent: int = 4
    max_connections: int = 2048  # open connections in total; the oldest unfinished one is dropped for a new one
    max_connections_per_client: int = 32  # open connections from one address; more are refused at once
    read_timeout_s: float = 3.0  # whole request (line, headers and body) must arrive within this
    host_names: list[str] = field(default_factory=list)  # extra names accepted in X-Triage-Host
    auth_window_s: int = 300
    request_timeout_s: float = 10.0  # upper bound on one /v1/probe answer; a request's deadline_s lowers it
    nvml_call_timeout_s: float = 5.0
    hang_quarantine_s: float = 60.0
    max_stuck_workers: int = 3
    expected_gpus: int | None = None
    disk_paths: list[str] = field(default_factory=lambda: ["/", "/tmp", "/var/tmp"])
    shm_path: str = "/dev/shm"
    shm_min_bytes: int = 1024**3
    disk_min_free_pct: float = 5.0
    memory_min_available_pct: float = 5.0
    sbe_volatile_threshold: int = 1000
    pcie_replay_threshold: int = 100
    ib_error_threshold: int = 10
    proc_root: str = "/proc"
    sys_root: str = "/sys"
    etc_root: str = "/etc"
    kmsg_path: str = "/dev/kmsg"
    fabric_manager_unit: str = "nvidia-fabricmanager"
    log_level: str = "INFO"
    log_format: str = "text"  # or "json": one JSON object per line
    tls_cert: str | None = None  # PEM certificate (chain): the agent then speaks HTTPS only
    tls_key: str | None = None  # PEM private key, when not in tls_cert
    tls_client_ca: str | None = None  # PEM CA bundle: clients must present a certificate it issued

    def listen_addr(self) -> tuple[str, int]:
        return parse_listen(self.listen)


def parse_listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not is_ascii_uint(port, 5) or not 0 <= int(port) < 65536:
        raise ConfigError(f"listen address {value!r} is not ADDR:PORT")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


_SCALARS: dict[str, type] = {"str": str, "int": int, "float": float, "bool": bool}


def _field_types() -> dict[str, tuple[type, bool, bool]]:
    """Each field's (base type, optional, is a list), read from its annotation's text.

    The annotations are strings (`from __future__ import annotations`) such as "str | None" or
    "list[str]"; evaluating them (typing.get_type_hints) needs Python >= 3.10, and the agent
    runs on 3.8, so they are read as text.
    """
    out: dict[str, tuple[type, bool, bool]] = {}
    for f in dataclasses.fields(AgentConfig):
        parts = [p.strip() for p in str(f.type).split("|")]
        optional = "None" in parts
        rest = [p for p in parts if p != "None"]
        text = rest[0] if rest else "str"
        is_list = text.startswith(("list[", "List["))
        if is_list:
            text = text[text.index("[") + 1:-1].strip()
        out[f.name] = (_SCALARS[text], optional, is_list)  # a new field type must be added to _SCALARS
    return out


def _coerce(name: str, typ: tuple[type, bool, bool], value: Any) -> Any:
    base, optional, is_list = typ
    if value is None or (optional and value == ""):
        if optional:
            return None
        raise ConfigError(f"{name} must not be empty")
    try:
        if is_list:
            if isinstance(value, str):
                return [v.strip() for v in value.split(",") if v.strip()]
            if not isinstance(value, list):
                raise TypeError
            return [str(v) for v in value]
        if base is bool:
            return value if isinstance(value, bool) else str(value).lower() in ("1", "true", "yes", "on")
        if base is int and isinstance(value, float):
            raise TypeError
        return base(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name}: {value!r} is not a valid {base.__name__}") from None


def load_config(path: str | None = None, env: dict[str, str] | None = None, **overrides: Any) -> AgentConfig:
    env = dict(os.environ) if env is None else env
    types_ = _field_types()
    values: dict[str, Any] = {}
    path = path or env.get("NODE_AGENT_CONFIG")
    if path:
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
        except ValueError as exc:
            raise ConfigError(f"config file {path} is not valid JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise ConfigError(f"config file {path} must hold a JSON object")
        unknown = sorted(set(data) - set(types_))
        if unknown:
            raise ConfigError(f"config file {path}: unknown keys {', '.join(unknown)}")
        values.update({k: _coerce(k, types_[k], v) for k, v in data.items()})
    for name, typ in types_.items():
        key = "NODE_AGENT_" + name.upper()
        if key in env:
            values[name] = _coerce(key, typ, env[key])
    for name, value in overrides.items():
        if value is not None:
            values[name] = _coerce(name, types_[name], value)
    cfg = AgentConfig(**values)
    parse_listen(cfg.listen)
    if cfg.max_body_bytes < 256 or cfg.max_concurrent < 1:
        raise ConfigError("max_body_bytes must be >= 256 and max_concurrent >= 1")
    if cfg.max_connections < 8 or cfg.max_connections_per_client < 1 or not 0.1 <= cfg.read_timeout_s <= 60:
        raise ConfigError("max_connections must be >= 8, max_connections_per_client >= 1 and "
                          "read_timeout_s between 0.1 and 60")
    if cfg.log_format not in ("text", "json"):
        raise ConfigError(f"log_format {cfg.log_format!r}: expected text or json")
    if (cfg.tls_key or cfg.tls_client_ca) and not cfg.tls_cert:
        raise ConfigError("tls_key and tls_client_ca need tls_cert (the agent's certificate)")
    return cfg
