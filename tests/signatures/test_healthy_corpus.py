"""The healthy-run corpus (tests/data/healthy/): real-format logs of runs that did not fail.

The whole shipped library must produce no diagnosis on any of them, alone or all together. The files
are full of the strings that look like failures but are not (NCCL INFO "NET/IB : No device found.",
"No plugin found (libnccl-net.so)", "set by environment to", c10d "TIMEOUT(ms)", fp16 "OVERFLOW!
Skipping step", "process group has NOT been destroyed", CPU-only "Found no NVIDIA driver",
NV_WARN_NOTHING_TO_DO on a host without NVSwitch, sacct COMPLETED, "OOMKilled": false, ...);
test_corpus_keeps_its_lookalikes makes sure they stay in it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.engine import diagnose_paths

HEALTHY = Path(__file__).resolve().parents[1] / "data" / "healthy"
FILES = sorted(HEALTHY.glob("*.log"))

# strings the taxonomy's hint comments and the dev-eval hard negatives warn about, each present in at
# least one healthy file
LOOKALIKES = [
    "NET/IB : No device found.",
    "No plugin found (libnccl-net.so)",
    "cannot open shared object file: No such file or directory",
    "Failed to open libibverbs.so",
    "NCCL_SOCKET_IFNAME set by environment to",
    "NCCL_IB_TIMEOUT set by environment to",
    "NCCL version 2.",
    "[Service thread] Connection closed by localRank",
    "TIMEOUT(ms): 600000",
    "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC",
    "TORCH_DISTRIBUTED_DEBUG",
    "process group has NOT been destroyed",
    "destroy_process_group() was not called before program exit",
    "[deepspeed] OVERFLOW! Rank 0 Skipping step.",
    "Gradient overflow.  Skipping step",
    "gradient overflow detected, skipping step",
    "number of nan iterations:   0",
    "loss scale:",
    "Found no NVIDIA driver on your system",
    "GradScaler is enabled, but CUDA is not available",
    "This DataLoader will create 8 worker processes in total",
    "leaked shared_memory objects to clean up at shutdown",
    "GPU KV cache size:",
    "NV_WARN_NOTHING_TO_DO",
    "Successfully configured all the available GPUs and NVSwitches",
    "NVRM: loading NVIDIA UNIX x86_64 Kernel Module",
    "NVRM: GPU at PCI:",
    "nvidia-nvswitch: Probing device",
    "Pending                           : No",
    "Remapping Failure Occurred        : No",
    "DRAM Uncorrectable            : 0",
    "State                             : Completed",
    "GPU Recovery Action                   : None",
    "COMPLETED      0:0",
    "CANCELLED+",
    "JobState=COMPLETED",
    "TimeLimit=1-00:00:00",
    "PreemptTime=None",
    "State: COMPLETED (exit code 0)",
    "open files                          (-n) 1048576",
    "/dev/shm",
    '"OOMKilled": false',
    "Reason:       Completed",
    "exiting program after 230.0 minutes",
    "Saving model checkpoint",
    "Loading checkpoint shards: 100%",
]


def test_corpus_is_substantial() -> None:
    assert len(FILES) >= 10
    for path in FILES:
        lines = path.read_text(encoding="utf-8").count("\n")
        assert lines >= 250, f"{path.name} has only {lines} lines"


def test_corpus_keeps_its_lookalikes() -> None:
    corpus = "\n".join(p.read_text(encoding="utf-8") for p in FILES)
    missing = [s for s in LOOKALIKES if s not in corpus]
    assert missing == [], f"look-alike strings no longer in the healthy corpus: {missing}"


def _offending(report) -> str:  # noqa: ANN001
    out = []
    for d in report.diagnoses:
        out.append(f"{d.signature} ({d.level.name.lower()}, {d.evidence_count} line(s)):")
        out.extend(f"    {e.source}:{e.line}: {e.text[:300]}" for e in d.evidence[:5])
    return "\n".join(out)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_library_is_silent_on_healthy_log(path: Path) -> None:
    report = diagnose_paths([str(path)])
    assert report.diagnoses == [], f"diagnoses on healthy log {path.name}:\n{_offending(report)}"


def test_library_is_silent_on_whole_corpus_at_once() -> None:
    # min_count patterns and co-occurrence rules see all files together, as in a multi-file upload
    report = diagnose_paths([str(HEALTHY)])
    assert report.diagnoses == [], f"diagnoses on the healthy corpus:\n{_offending(report)}"
