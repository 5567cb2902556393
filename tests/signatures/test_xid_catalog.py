"""The Xid / SXid catalogue (node_agent/data/xid-catalog.json) against the real engine and the node agent:
every Xid code of NVIDIA's catalog and every NVSwitch SXid code gpud knows is there with severity and
action, the engine and the node agent read the same entries, every kernel line with a code is diagnosed by
the signature the catalogue names (with the code's meaning and action filled in), the line's own
Fatal/Non-fatal word decides an NVLink5 Xid's action, "caused by previous Xid N" counts for N, and
consequence Xids rank after the fault that caused them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bot.engine import catalog, diagnose_texts
from bot.engine.lint import lint
from bot.engine.model import Level
from node_agent import catalog as shared
from node_agent import xid as agent_xid
from node_agent.findings import Severity

DOC = json.loads(shared.PATH.read_text(encoding="utf-8"))
CATALOG = DOC["xids"]
ENTRIES = {e["code"]: e for e in CATALOG}
SXIDS = {e["code"]: e for e in DOC["sxids"]}

# NVIDIA's published Xid catalog runs from 1 to 173 (gpud mirrors it); the SXid codes are gpud's list
# (components/accelerator/nvidia/sxid), copied here because tests never read the shared folder
EXPECTED_CODES = list(range(1, 174))
EXPECTED_SXIDS = [
    10001, 10002, 10003, 10004, 10005, 11001, 11004, 11009, 11012, 11013, 11018, 11019, 11020, 11021, 11022, 11023,
    12001, 12002, 12020, 12021, 12022, 12023, 12024, 12025, 12026, 12027, 12028, 12030, 12031, 12032, 14017, 15001,
    15006, 15008, 15009, 15010, 15011, 15012, 15013, 19047, 19048, 19049, 19054, 19055, 19056, 19057, 19058, 19059,
    19060, 19061, 19062, 19063, 19064, 19065, 19066, 19067, 19068, 19069, 19070, 19071, 19084, 20001, 20009, 20012,
    20034, 22003, 22011, 22012, 22013, 23001, 23002, 23003, 23004, 23005, 23006, 23007, 23008, 23009, 23010, 23011,
    23012, 23013, 23014, 23015, 23016, 23017, 24001, 24002, 24003, 24004, 24005, 24006, 24007,
]
# the codes of the field notes' Xid table (notes/nvml-probes.md section 3): the ones training clusters meet
NOTES_CODES = (
    [8, 13, 31, 32, 38, 43, 44, 45, 46, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 109, 110, 119, 120,
     121, 136, 137, 140, 143]
    + list(range(144, 151)) + [154, 155, 156, 157, 158, 159] + list(range(162, 173))
)
# ones the issue names as met in training clusters but missing before
FIELD_CODES = [173, 54, 80, 39, 40, 41, 70, 71, 72, 75, 76, 77, 85, *range(126, 136), 60, 160, 161]

LINE_FORMATS = [
    "[ 8812.553190] NVRM: Xid (PCI:0000:3b:00): {code}, pid=4242, name=python3, test detail",
    "Jun 26 05:06:30 gpu-node-17 kernel: NVRM: Xid (PCI:0000:3b:00): {code}, pid='<unknown>', name=<unknown>, test detail",
    "NVRM: Xid (0000:3b:00): {code}, Ch 00000010, intr 00000000",
]


def _top(text: str):  # noqa: ANN202
    report = diagnose_texts([("kern.log", text)])
    assert report.diagnoses, f"no diagnosis for {text!r}"
    return report.diagnoses[0], report


def test_catalog_covers_nvidias_xid_catalog() -> None:
    assert len(ENTRIES) >= 165
    assert sorted(set(EXPECTED_CODES) - set(ENTRIES)) == []
    assert sorted(set(NOTES_CODES + FIELD_CODES) - set(ENTRIES)) == []


def test_catalog_covers_every_sxid_gpud_knows() -> None:
    assert sorted(set(EXPECTED_SXIDS) - set(SXIDS)) == []


def test_no_duplicate_codes() -> None:
    for table in ("xids", "sxids"):
        codes = [e["code"] for e in DOC[table]]
        assert len(codes) == len(set(codes)), table


def test_the_catalogue_lints_clean() -> None:
    assert catalog.catalog_problems() == []


@pytest.mark.parametrize("entry", CATALOG + DOC["sxids"], ids=lambda e: str(e["code"]))
def test_entry_is_complete(entry: dict) -> None:
    for key in ("meaning", "advice", "severity", "origin", "action"):
        assert isinstance(entry.get(key), str) and entry[key].strip(), f"{key} missing"
    assert entry.get("mnemonic" if entry["code"] < 1000 else "name")
    assert entry["severity"] in shared.SEVERITIES and entry["origin"] in shared.ORIGINS
    assert entry["action"] in shared.ACTIONS


@pytest.mark.parametrize("entry", CATALOG, ids=lambda e: str(e["code"]))
def test_engine_reads_the_entry(entry: dict) -> None:
    desc = catalog.describe(entry["code"])
    assert desc["xid_name"] == entry["mnemonic"] and desc["xid_action"] == entry["advice"]
    assert desc["xid_meaning"] == entry["meaning"] and desc["xid_severity"] == entry["severity"]


def test_node_agent_and_engine_read_the_same_entries() -> None:
    assert set(agent_xid.CATALOG) == set(catalog._catalog()) == set(ENTRIES)
    assert set(agent_xid.SXID_CATALOG) == set(SXIDS)
    want = {"fatal": Severity.CRITICAL, "critical": Severity.CRITICAL, "warning": Severity.WARNING, "info": Severity.INFO}
    for code, entry in ENTRIES.items():
        got = agent_xid.info(code)
        eng = catalog.lookup(code)
        assert eng == entry
        assert (got.mnemonic, got.meaning, got.action, got.action_bucket) == (
            eng["mnemonic"], eng["meaning"], eng["advice"], eng["action"]), code
        assert got.severity is want[eng["severity"]], code
    for code, entry in SXIDS.items():
        assert catalog.lookup_sxid(code) == entry
        assert agent_xid.sxid_info(code).meaning == entry["meaning"]


def test_the_node_agent_reads_it_without_the_engine() -> None:
    # the file sits inside the node agent's package, and the reader is standard library only
    assert shared.PATH.parent.parent == Path(agent_xid.__file__).parent
    src = Path(shared.__file__).read_text(encoding="utf-8") + Path(agent_xid.__file__).read_text(encoding="utf-8")
    imports = set(re.findall(r"^(?:from|import) ([\w.]+)", src, re.M))
    assert not {m for m in imports if m.split(".")[0] in ("bot", "yaml", "regex", "signatures")}


def test_nvlink5_and_sxid_severity_follows_the_lines_word() -> None:
    for code in range(144, 151):
        assert set(ENTRIES[code]["line_word"]) == {"Fatal", "Non-fatal"}
        assert catalog.occurrence(code, "RLW_REMAP Non-fatal XC0 i0 Link 02")["action"] == "none"
        assert catalog.occurrence(code, "RLW_REMAP Nonfatal XC0 i0 Link 02")["severity"] == "warning"
        assert catalog.occurrence(code, "NETIR_LINK_EVT Fatal XC0 i0 Link 08")["severity"] == "fatal"
    for entry in SXIDS.values():
        assert set(entry["line_word"]) == {"Fatal", "Non-fatal"}
        assert catalog.occurrence(entry["code"], "Fatal, Link 30", switch=True)["severity"] == "fatal"
        assert catalog.occurrence(entry["code"], "Non-fatal, Link 30", switch=True)["severity"] in ("warning", "info")


def test_lint_reports_broken_entries(tmp_path: Path) -> None:
    doc = json.loads(json.dumps(DOC))
    doc["xids"][0]["severity"] = "scary"
    doc["xids"][1]["action"] = "pray"
    del doc["xids"][2]["meaning"]
    doc["xids"].append(dict(doc["xids"][3]))
    doc["sxids"][0]["line_word"] = {"Maybe": {"severity": "info", "action": "none"}}
    doc["xids"][78]["action"] = "none"  # Xid 79 is fatal
    path = tmp_path / "xid-catalog.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    got = "\n".join(shared.problems(path))
    for want in ("xid 1: severity 'scary'", "xid 2: action 'pray'", "xid 3: meaning missing", "xid 4: duplicate code",
                 "sxid 10001: line_word keys", "xid 79: a fatal code needs more than 'none'"):
        assert want in got, got
    path.write_text("{not json", encoding="utf-8")
    assert "not valid JSON" in shared.problems(path)[0]


def test_library_lint_includes_the_catalogue() -> None:
    from bot.engine.library import load_library

    assert not [p for p in lint(load_library()) if "xid-catalog" in p.file]


def test_non_fatal_nvlink_xid_is_not_drained() -> None:
    for line in ["[ 10.1] NVRM: Xid (PCI:0018:01:00): 145, RLW_REMAP Non-fatal XC0 i0 Link 02 (0x0 0x0)",
                 "kernel: NVRM: Xid (PCI:0000:5f:00): 149, NETIR_LINK_EVT Nonfatal XC0 i0 Link 11 (0x0)",
                 "NVRM: Xid (PCI:0000:5f:00): 144, SAW_MVB_NONFATAL NonFatal XC0 i0 Link 01"]:
        top, report = _top(line)
        assert top.signature == "xid-nvlink"
        assert top.causes[0].id == "non-fatal-link-event", line
        assert report.next_action.text.startswith("No drain or reset"), report.next_action.text
        assert "no drain or reset is needed" in top.summary
    top, report = _top("NVRM: Xid (PCI:0018:01:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 08 (0x004505c6 0x00000000)")
    assert top.causes[0].id == "link-hardware" and "Drain" in report.next_action.text
    # a Fatal line in the burst outweighs the Non-fatal ones around it
    top, _ = _top("NVRM: Xid (PCI:0018:01:00): 145, RLW_REMAP Non-fatal XC0 i0 Link 02 (0x0)\n"
                  "NVRM: Xid (PCI:0018:01:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 08 (0x004505c6 0x00000000)")
    assert top.causes[0].id == "link-hardware"
    # Xid 74 has no word on its line: the catalogue rates the code fatal
    top, _ = _top("kernel: NVRM: Xid (PCI:0000:c1:00): 74, pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link 1")
    assert top.causes[0].id == "link-hardware"


def test_xid_other_action_follows_the_catalogue() -> None:
    top, _ = _top("NVRM: Xid (PCI:0000:3b:00): 62, pid=1, name=python3, PMU halt")
    assert top.causes[0].id == "hardware-fault"
    top, _ = _top("NVRM: Xid (PCI:0000:3b:00): 70, pid=1, name=python3, CE3: Unknown Error")
    assert top.causes[0].id == "engine-or-application-fault"
    top, _ = _top("NVRM: Xid (PCI:0000:3b:00): 93, InfoROM erase limit")
    assert top.causes[0].id == "informational"


def test_sxid_summary_names_the_catalogue_meaning() -> None:
    top, _ = _top("nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): 20034, Fatal, Link 30 LTSSM Fault Up")
    assert SXIDS[20034]["meaning"] in top.summary
    assert top.causes[0].id == "switch-or-link-hardware"


def test_an_sxid_line_nothing_rates_only_supports() -> None:
    """A code outside NVIDIA's SXid list printed without a Fatal/Non-fatal word (SOE firmware reports,
    error-log dump lines, test values) starts no diagnosis, however often it repeats; beside a line the
    catalogue rates it is evidence; a headline with its own word is rated by that word."""
    soe = "[ 300.1] nvidia-nvswitch2: SXid (PCI:0000:c3:00.0): 26007, SOE EXTERR\n"
    dump = "[ 300.2] nvidia-nvswitch2: SXid (PCI:0000:c3:00.0): 12033, Severity 1 Engine instance 07 Sub-engine instance 00\n"
    assert not (set(SXIDS) & {26007, 12033})
    # past the evidence sample (64 lines a pattern): the count of unrated lines must not fire it either
    assert diagnose_texts([("kern.log", (soe + dump) * 150)]).diagnoses == []
    top, _ = _top(soe + "[ 300.3] nvidia-nvswitch2: SXid (PCI:0000:c3:00.0): 20034, Fatal, Link 30 LTSSM Fault Up\n")
    assert top.signature == "nvswitch-sxid" and top.evidence[0].captures["sxid"] == "20034"
    assert {e.captures["sxid"] for e in top.evidence} == {"20034", "26007"}
    top, _ = _top("nvidia-nvswitch2: SXid (PCI:0000:c1:00.0): 28006, Non-fatal, Link 46 MC TS crumbstore MCTO (First)")
    assert top.signature == "nvswitch-sxid" and top.causes[0].id == "corrected-errors"
    # a headline cut inside "Link NN" is a truncated copy, not a report
    assert diagnose_texts([("kern.log", "nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20009, Non-fatal, Lin")]).diagnoses == []


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
