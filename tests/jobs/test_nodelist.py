"""Host lists, compared with what the real `scontrol show hostnames` printed (data/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.jobs.nodelist import NodeListError, expand_nodelist

DATA = Path(__file__).parent / "data"


def _captured() -> list[tuple[str, list[str]]]:
    rows = []
    for line in (DATA / "scontrol-show-hostnames.txt").read_text().splitlines():
        expr, hosts = line.split("\t")
        rows.append((expr, hosts.split()))
    return rows


@pytest.mark.parametrize(("expr", "hosts"), _captured())
def test_same_as_scontrol_show_hostnames(expr: str, hosts: list[str]) -> None:
    assert expand_nodelist(expr) == hosts


@pytest.mark.parametrize("empty", ["", "(null)", "None assigned", None, "  "])
def test_no_nodes(empty: str | None) -> None:
    assert expand_nodelist(empty) == []


@pytest.mark.parametrize("bad", ["n[10-8]", "n[1-2", "n]1[", "n[a-b]", "n[[1-2]]", "n[1-]"])
def test_malformed_lists_are_errors(bad: str) -> None:
    with pytest.raises(NodeListError):
        expand_nodelist(bad)


def test_expansion_is_bounded() -> None:
    # A webhook payload could carry this; it must not allocate a billion names.
    with pytest.raises(NodeListError, match="more than"):
        expand_nodelist("n[0-999999999]")
    with pytest.raises(NodeListError, match="more than"):
        expand_nodelist("a[0-999]-b[0-999]")
    assert len(expand_nodelist("n[1-100]", limit=100)) == 100


def test_duplicates_collapse_in_order() -> None:
    assert expand_nodelist("gpu[01-02],gpu01,gpu03") == ["gpu01", "gpu02", "gpu03"]
