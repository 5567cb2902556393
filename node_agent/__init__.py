"""node-agent: read-only NVML and host health probes for the triage bot (stdlib + nvidia-ml-py)."""

__version__ = "0.1.0"
