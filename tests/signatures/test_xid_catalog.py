"""signatures/xid-catalog.yaml against the real engine: every Xid code training clusters meet is in the
catalog, every kernel line with that code is diagnosed by the signature the catalog names (with the
code's meaning and action filled in), "caused by previous Xid N" counts for N, and consequence Xids
rank after the fault that caused them."""

from __future__ import annotations

import re

import pytest
import yaml

from bot.engine import catalog, diagnose_texts
from bot.engine.library import default_root
from bot.engine.model import Level

CATALOG = yaml.safe_load((default_root() / "xid-catalog.yaml").read_text(encoding="utf-8"))["xids"]
ENTRIES = {code: e for e in CATALOG for code in (e.get("codes") or [e["code"]])}

# the codes of the field notes' Xid table (notes/nvml-probes.md section 3), copied here because tests
# never read the shared folder
EXPECTED_CODES = (
    [8, 13, 31, 32, 38, 43, 44, 45, 46, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 109, 110, 119, 120,
     121, 136, 137, 140, 143]
    + list(range(144, 151)) + [154, 155, 156, 157, 158, 159] + list(range(162, 173))
)

LINE_FORMATS = [
    "[ 8812.553190] NVRM: Xid (PCI:0000:3b:00): {code}, pid=4242, name=python3, test detail",
    "Jun 26 05:06:30 gpu-node-17 kernel: NVRM: Xid (PCI:0000:3b:00): {code}, pid='<unknown>', name=<unknown>, test detail",
    "NVRM: Xid (0000:3b:00): {code}, Ch 00000010, intr 00000000",
]


def _top(text: str):  # noqa: ANN202
    report = diagnose_texts([("kern.log", text)])
    assert report.diagnoses, f"no diagnosis for {text!r}"
    return report.diagnoses[0], report


def test_catalog_covers_every_expected_code() -> None:
    assert sorted(set(EXPECTED_CODES) - set(ENTRIES)) == []


@pytest.mark.parametrize("entry", CATALOG, ids=lambda e: str(e.get("code", e.get("codes"))))
def test_entry_is_complete(entry: dict) -> None:
    for key in ("mnemonic", "meaning", "action", "culprit", "bucket", "signature"):
        assert isinstance(entry.get(key), str) and entry[key].strip(), f"{key} missing"
    code = (entry.get("codes") or [entry["code"]])[0]
    desc = catalog.describe(code)
    assert desc["xid_name"] == entry["mnemonic"] and desc["xid_action"] == entry["action"]


@pytest.mark.parametrize("code", sorted(ENTRIES))
def test_xid_line_is_diagnosed_by_its_signature(code: int) -> None:
    want = ENTRIES[code]["signature"]
    for fmt in LINE_FORMATS:
        top, _ = _top(fmt.format(code=code))
        assert top.signature == want, f"Xid {code} ({fmt[:30]}...): got {top.signature}, want {want}"
        assert not re.search(r"\{xid\w*\}", top.summary), top.summary
        if want in ("xid-other", "xid-13-31-app-fault", "xid-nvlink", "xid-94-95-ecc-containment"):
            assert f"Xid {code}" in top.summary, top.summary


@pytest.mark.parametrize("code", sorted(c for c in ENTRIES if c != 45))
def test_caused_by_previous_xid_counts_for_the_cause(code: int) -> None:
    line = f"[ 8812.903117] NVRM: Xid (PCI:0000:3b:00): 45, pid=4242, name=python3, Ch 00000008 caused by previous Xid {code}"
    top, _ = _top(line)
    assert top.signature == ENTRIES[code]["signature"]
    if top.signature == "xid-other":
        assert f"Xid {code}" in top.summary and "Xid 45" not in top.summary


def test_consequence_xids_rank_after_the_fault() -> None:
    burst = "\n".join([
        "[ 5512.220341] NVRM: Xid (PCI:0018:01:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 08 (0x004505c6 0x00000000)",
        "[ 5512.503117] NVRM: Xid (PCI:0018:01:00): 45, pid=48211, name=python3, Ch 00000001 caused by previous Xid 149",
        "[ 5512.624001] NVRM: Xid (PCI:0018:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
        "[ 5512.700000] NVRM: Xid (PCI:0018:01:00): 94, pid=48211, name=python3, Contained: SM (0x1). RST: No, D-RST: No",
    ])
    top, report = _top(burst)
    assert top.signature == "xid-nvlink" and "Xid 149" in top.summary
    levels = {d.signature: d.level for d in report.diagnoses}
    assert levels["xid-other"] == Level.SECONDARY
    assert levels["xid-94-95-ecc-containment"] == Level.SECONDARY


def test_first_xid_of_a_burst_wins_between_equals() -> None:
    # Xid 32 (PBDMA) 6 ms before Xid 31: the 31 is the consequence
    top, report = _top("[24128.828315] NVRM: Xid (PCI:0000:01:00): 32, Channel ID 00000000 intr 00004000\n"
                       "[24128.834365] NVRM: Xid (PCI:0000:01:00): 31, Ch 00000003, engmask 00000101, intr 10000000")
    assert top.signature == "xid-other" and "Xid 32" in top.summary
    assert [d.signature for d in report.diagnoses][:2] == ["xid-other", "xid-13-31-app-fault"]
    # an application fault followed by its channel reset (Xid 43): the fault wins
    top, _ = _top("[ 311.100000] NVRM: Xid (PCI:0000:01:00): 13, Graphics SM Warp Exception on (GPC 1, TPC 0): Out Of Range Address\n"
                  "[ 311.200000] NVRM: Xid (PCI:0000:01:00): 43, Ch 00000020, engmask 00000101")
    assert top.signature == "xid-13-31-app-fault"


def test_fallen_off_bus_beats_everything_it_causes() -> None:
    top, _ = _top("\n".join([
        "[90211.554310] NVRM: Xid (PCI:0000:3b:00): 79, pid=48213, name=python3, GPU has fallen off the bus.",
        "[90211.554402] NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.",
        "[90211.601000] NVRM: Xid (PCI:0000:3b:00): 119, pid=48213, name=python3, Timeout waiting for RPC from GSP0! Expected function 76 (GSP_RM_CONTROL) (0x20800a4c 0x4).",
        "[90211.700000] NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)",
        "Unable to determine the device handle for GPU 0000:3B:00.0: GPU is lost. Reboot the system to recover this GPU",
    ]))
    assert top.signature == "xid-79-fallen-off-bus"


def test_kernel_lines_quoted_by_other_tools() -> None:
    for text in [
        '[XID found] (54 minutes ago) "NVRM: Xid (PCI:0000:9b:00): 119, pid=4071838, name=python, Timeout after 45s of waiting for RPC response from GPU4 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20801702 0x4)."',
        "mynode-066 | ERROR: nhc: Health check failed: check_gpu_xid: GPU Xid errors detected: [ 3606.832215] NVRM: Xid (PCI:0002:00:00): 119, pid=67769, name=nvidia-smi, Timeout waiting for RPC from GSP1!",
        "[Wed Jun 26 05:06:30 2024] NVRM: Xid (PCI:0000:3b:00): 119, pid=1, name=python, Timeout waiting for RPC from GSP!",
        "2024-06-26T05:06:30+0000 gpu-node-17 kernel: NVRM: Xid (PCI:0000:3b:00): 119, pid=1, name=python, Timeout waiting for RPC from GSP!",
    ]:
        top, _ = _top(text)
        assert top.signature == "xid-119-120-gsp", text
