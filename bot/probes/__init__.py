"""Bot-side access to node agents: signed HTTP calls, fan-out to the implicated hosts."""

from bot.probes.client import AgentDirectory, DirectoryError, HostProbeReport, fetch_catalogue, probe_hosts

__all__ = ["AgentDirectory", "DirectoryError", "HostProbeReport", "fetch_catalogue", "probe_hosts"]
