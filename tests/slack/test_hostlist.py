"""Host lists from webhooks and /diagnose hosts: the Slurm expander, bounded, with clear errors."""

from __future__ import annotations

import pytest

from bot.service.hostlist import HostListError, expand_hostlist


def test_forms_users_and_schedulers_write() -> None:
    assert expand_hostlist("gpu[01-03,07],login1") == ["gpu01", "gpu02", "gpu03", "gpu07", "login1"]
    assert expand_hostlist(["gpu-h200-07", "gpu-h200-[07-08]"]) == ["gpu-h200-07", "gpu-h200-08"]
    assert expand_hostlist("rack[1-2]-g[1-2]") == ["rack1-g1", "rack1-g2", "rack2-g1", "rack2-g2"]
    assert expand_hostlist(None) == [] and expand_hostlist("") == []


@pytest.mark.parametrize("bad", ["gpu[01-03", "gpu01]", "gpu[a-b]", "gpu[1-99999]"])
def test_malformed_or_huge_lists_are_refused(bad: str) -> None:
    with pytest.raises(HostListError):
        expand_hostlist(bad)
