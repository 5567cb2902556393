"""Kernel Xid lines as drivers print them (formats from the notes, section 1.9), and the catalog."""

from __future__ import annotations

import pytest

from node_agent.findings import Severity
from node_agent.xid import CATALOG, decode_gpu_mapping, decode_line, info, normalize_pci


def test_old_format_without_pci_prefix():
    ev = decode_line("NVRM: Xid (0000:3b:00): 79, GPU has fallen off the bus.")
    assert (ev.xid, ev.pci, ev.inferred) == (79, "0000:3b:00", False)
    assert "fell off the PCIe bus" in ev.info.meaning and ev.severity() is Severity.CRITICAL


def test_new_format_with_pid_and_name():
    ev = decode_line("[ 1234.5678] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
                     "GPU has fallen off the bus.")
    assert (ev.xid, ev.pci, ev.pid, ev.process) == (79, "0000:3b:00", None, None)
    assert ev.message == "GPU has fallen off the bus."


def test_old_format_with_hex_words():
    ev = decode_line("NVRM: Xid (0000:01:00): 13, 0005 00000000 0000c1c0 00000368 00000000 00000000")
    assert ev.xid == 13 and ev.pci == "0000:01:00" and ev.severity() is Severity.WARNING


def test_caused_by_previous_xid():
    ev = decode_line("NVRM: Xid (PCI:0018:01:00): 45, pid=2211, name=python3, Ch 00000001 caused by previous Xid 149")
    assert (ev.xid, ev.pid, ev.process, ev.caused_by) == (45, 2211, "python3", 149)


def test_nvlink5_severity_word():
    fatal = decode_line("NVRM: Xid (PCI:0018:01:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 08 (0x004505c6 0x00000000)")
    minor = decode_line("NVRM: Xid (PCI:0018:01:00): 145, RLW_REMAP Non-fatal XC0 i0 Link 02 (0x0 0x0)")
    assert fatal.severity() is Severity.CRITICAL and minor.severity() is Severity.WARNING
    assert (fatal.severity_word, minor.severity_word) == ("Fatal", "Non-fatal")
    assert "no drain or reset is needed" in minor.action() and "drain the node" in fatal.action()
    assert "NVLink5" in info(149).meaning


def test_recovery_action_xid_154():
    ev = decode_line("NVRM: Xid (PCI:0009:01:00): 154, GPU recovery action changed from 0x4 (Drain and Reset) "
                     "to 0x1 (GPU Reset Required)")
    assert ev.recovery_action == 1 and ev.severity() is Severity.CRITICAL
    none = decode_line("NVRM: Xid (PCI:0009:01:00): 154, GPU recovery action changed from 0x1 (GPU Reset "
                       "Required) to 0x0 (None)")
    assert none.severity() is Severity.INFO


@pytest.mark.parametrize(
    ("line", "pci"),
    [
        ("NVRM: GPU 0000:18:00.0: GPU has fallen off the bus.", "0000:18:00"),
        ("NVRM: The NVIDIA GPU 0000:b3:00.0 (PCI ID: 10de:2330) installed in this system has fallen off the bus "
         "and is not responding to commands.", "0000:b3:00"),
    ],
)
def test_multi_line_fallen_off_the_bus_is_79(line, pci):
    ev = decode_line(line)
    assert (ev.xid, ev.pci, ev.inferred) == (79, pci, True)


def test_gsp_timeout_with_and_without_xid():
    ev = decode_line("NVRM: Xid (PCI:0000:b8:00): 119, pid=1582259, name=nvc:[driver], Timeout after 6s of waiting "
                     "for RPC response from GPU1 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20800a4c 0x4).")
    assert (ev.xid, ev.gsp_gpu, ev.inferred) == (119, 1, False)
    bare = decode_line("NVRM: Timeout after 45s of waiting for RPC response from GPU4 GSP! Expected function 76")
    assert (bare.xid, bare.gsp_gpu, bare.pci, bare.inferred) == (119, 4, None, True)


def test_other_lines_are_not_xids():
    for line in ("nvidia-nvlink: Nvlink Core is being initialized", "NVRM: loading NVIDIA UNIX x86_64 Kernel Module",
                 "mlx5_core 0000:0c:00.0: Port module event", "Xid is a word here: 12, nothing"):
        assert decode_line(line) is None


def test_pci_to_uuid_mapping_line():
    assert decode_gpu_mapping("NVRM: GPU at PCI:0000:01:00: GPU-6e7a1c1c-5f0e-3f1c-2e6f-1f0d1b2a3c4d") == (
        "0000:01:00", "GPU-6e7a1c1c-5f0e-3f1c-2e6f-1f0d1b2a3c4d")


def test_nvml_and_kernel_bus_ids_normalize_to_the_same_key():
    assert normalize_pci("00000000:3B:00.0") == normalize_pci("PCI:0000:3b:00") == "0000:3b:00"


# Every Xid of the notes' section 3 table has a meaning and an action.
NOTES_TABLE = [8, 13, 31, 32, 38, 43, 44, 45, 46, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 109, 110, 119, 120,
               121, 136, 137, 140, 143, *range(144, 151), 154, 155, 156, 157, 158, 159, *range(162, 173)]


@pytest.mark.parametrize("xid", NOTES_TABLE)
def test_catalog_covers_the_notes_table(xid):
    entry = CATALOG[xid]
    assert entry.meaning and entry.action and entry.mnemonic


def test_unknown_xid_still_decodes():
    ev = decode_line("NVRM: Xid (PCI:0000:01:00): 777, something new")
    assert ev.xid == 777 and ev.info.mnemonic == "UNKNOWN"
