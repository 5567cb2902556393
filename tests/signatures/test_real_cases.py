"""Real failure logs from public issue threads (tests/data/realcases/<case>/: the log file(s) as
pasted, and meta.yaml with the expected `label` and the thread it came from). Each case must be
named first, as an on-call engineer reading the top line of the answer would see it; `none` cases
(healthy runs, threads that quote an error string in passing) must stay silent. A case marked
`eval: skip` is a known miss or an ambiguous label, with the reason in its meta.yaml.

These are the logs the library was tuned on after the dev set; they guard against a pattern or
ranking change that fixes one family by breaking another."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from bot.engine import diagnose_paths

CASES = Path(__file__).resolve().parents[1] / "data" / "realcases"


def _cases() -> list[Path]:
    out = []
    for case in sorted(p for p in CASES.iterdir() if p.is_dir()):
        meta = yaml.safe_load((case / "meta.yaml").read_text(encoding="utf-8"))
        if str(meta.get("eval", "")).split("#")[0].strip() != "skip":
            out.append(case)
    return out


def test_the_set_is_broad() -> None:
    cases = _cases()
    labels = {yaml.safe_load((c / "meta.yaml").read_text(encoding="utf-8"))["label"] for c in cases}
    assert len(cases) >= 250 and len(labels) >= 60 and "none" in labels


@pytest.mark.parametrize("case", _cases(), ids=lambda p: p.name)
def test_real_case_is_named_first(case: Path) -> None:
    meta = yaml.safe_load((case / "meta.yaml").read_text(encoding="utf-8"))
    files = sorted(str(f) for f in case.iterdir() if f.name != "meta.yaml" and not f.name.startswith("."))
    report = diagnose_paths(files, workers=1)
    got = [d["signature"] for d in report.to_dict()["diagnoses"]]  # as the JSON contract reports them
    if meta["label"] == "none":
        assert got == [], f"{meta.get('source')}: a healthy log got {got}"
    else:
        assert got and got[0] == meta["label"], f"{meta.get('source')}: want {meta['label']}, got {got[:3]}"


def _attribution_cases() -> list[Path]:
    out = []
    for case in sorted(p for p in CASES.iterdir() if p.is_dir()):
        meta = yaml.safe_load((case / "meta.yaml").read_text(encoding="utf-8"))
        if ("initiating_rank" in meta or "initiating_host" in meta) and \
                str(meta.get("eval_attribution", "")).split("#")[0].strip() != "skip":
            out.append(case)
    return out


def test_the_attribution_set_is_broad() -> None:
    """Real multi-rank logs whose thread tells which rank or host started it (issue 10: at least 40)."""
    assert len(_attribution_cases()) >= 40


@pytest.mark.parametrize("case", _attribution_cases(), ids=lambda p: p.name)
def test_real_case_names_who_started_it(case: Path) -> None:
    """The rank and host the probes will be sent to: an expert's reading of the same log. A case
    that knows only the local rank (the `[dev]` of an NCCL header, one node) accepts `local_rank`."""
    meta = yaml.safe_load((case / "meta.yaml").read_text(encoding="utf-8"))
    files = sorted(str(f) for f in case.iterdir() if f.name != "meta.yaml" and not f.name.startswith("."))
    init = diagnose_paths(files, workers=1).to_dict()["initiating"] or {}
    if "initiating_rank" in meta:
        got = {init.get("rank"), init.get("local_rank")} - {None}
        assert meta["initiating_rank"] in got, f"{meta.get('source')}: rank want {meta['initiating_rank']}, got {init}"
    if "initiating_host" in meta:
        assert init.get("host") == meta["initiating_host"], f"{meta.get('source')}: host want {meta['initiating_host']}, got {init}"
