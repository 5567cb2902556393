"""Every real NCCL WARN line with a source location (`host:pid:tid [dev] file.cc:123 NCCL WARN`, as
NCCL has printed since 2.4) yields host, pid and GPU in its evidence, and the top diagnosis asks
for probes on that host: without this the probes never fire on real logs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bot.engine import diagnose_paths
from bot.engine.context import _PLACEHOLDER_HOST

CASES = Path(__file__).resolve().parents[1] / "data" / "realcases"
_HEADER = re.compile(r"(?<![\w.\-])(?P<host>[\w.\-]+):(?P<pid>\d+):\d+ \[(?P<dev>\d+)\] \S+(?::| )\d+ NCCL WARN ")


def _cases() -> list[Path]:
    out = []
    for case in sorted(p for p in CASES.iterdir() if p.is_dir()):
        for f in case.iterdir():
            if f.name != "meta.yaml" and _HEADER.search(f.read_text(encoding="utf-8", errors="replace")):
                out.append(case)
                break
    return out


def test_there_are_many_such_logs() -> None:
    assert len(_cases()) >= 40


@pytest.mark.parametrize("case", _cases(), ids=lambda p: p.name)
def test_nccl_warn_header_gives_host_pid_gpu_and_probes(case: Path) -> None:
    files = sorted(str(f) for f in case.iterdir() if f.name != "meta.yaml")
    report = diagnose_paths(files, workers=1).to_dict()
    checked = 0
    for i, d in enumerate(report["diagnoses"]):
        asked = {h for p in d["probes"] for h in p["hosts"]}
        for ev in d["evidence"]:
            m = _HEADER.search(ev["text"])
            if not m or _PLACEHOLDER_HOST.fullmatch(m["host"]):
                continue  # a redacted header ("hostname:116024:...") names no machine to probe
            checked += 1
            assert (ev["host"], ev["pid"], ev["gpu"]) == (m["host"], int(m["pid"]), int(m["dev"])), ev
            if i == 0 and d["probes"]:
                assert m["host"] in asked, (m["host"], d["probes"])
    if report["diagnoses"] and checked:
        assert report["diagnoses"][0]["hosts"], "the top diagnosis names no host"
