"""Host lists as users and schedulers write them ("gpu[01-03,07],login1", or a JSON list): one
expander for the whole bot, the Slurm source's (same results as `scontrol show hostnames`)."""

from __future__ import annotations

from bot.jobs.nodelist import NodeListError, expand_nodelist

MAX_HOSTS = 4096  # a typo like gpu[1-999999] in a webhook or /diagnose must not allocate a million names


class HostListError(ValueError):
    pass


def expand_hostlist(text: str | list[str] | None) -> list[str]:
    if not text:
        return []
    items = [str(x) for x in text] if isinstance(text, list) else [str(text)]
    hosts: list[str] = []
    try:
        for item in items:
            for host in expand_nodelist(item, limit=MAX_HOSTS):
                if host not in hosts:
                    hosts.append(host)
    except NodeListError as exc:
        raise HostListError(str(exc)) from None
    if len(hosts) > MAX_HOSTS:
        raise HostListError(f"more than {MAX_HOSTS} hosts")
    return hosts
