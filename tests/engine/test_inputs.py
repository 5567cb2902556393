"""Bad and unusual inputs: each gives a clear result through the real CLI, never a traceback."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SEED_LINES = ("[rank0]: torch.distributed.DistBackendError: NCCL error in: NCCLUtils.hpp:317, unhandled cuda error\n"
              "[rank0]: ncclUnhandledCudaError: Call to CUDA function failed.\n[rank0]: Last error:\n"
              "[rank0]: Cuda failure 999 'unknown error'\n")


def triage(*args: str, stdin: bytes | None = None) -> tuple[int, dict | str, str]:
    p = subprocess.run([sys.executable, "-m", "bot.cli.main", *args], input=stdin, capture_output=True,
                       timeout=300, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    out = p.stdout.decode()
    err = p.stderr.decode()
    assert "Traceback" not in err, err
    if "--json" in args and p.returncode == 0:
        return p.returncode, json.loads(out), err
    return p.returncode, out, err


def sigs(report: dict) -> list[str]:
    return [d["signature"] for d in report["diagnoses"]]


def test_empty_file(tmp_path: Path) -> None:
    f = tmp_path / "empty.log"
    f.write_bytes(b"")
    rc, rep, _ = triage("diagnose", "--json", str(f))
    assert rc == 0 and rep["diagnoses"] == []
    assert any("empty" in w for w in rep["warnings"])


def test_missing_path_is_a_clear_error(tmp_path: Path) -> None:
    rc, out, err = triage("diagnose", "--json", str(tmp_path / "nope.log"))
    assert rc == 2 and "no such file" in err


def test_binary_junk_still_diagnoses_the_text_in_it(tmp_path: Path) -> None:
    junk = os.urandom(300_000)
    f = tmp_path / "core.bin.log"
    f.write_bytes(junk[:150_000] + b"\n" + SEED_LINES.encode() + junk[150_000:])
    rc, rep, _ = triage("diagnose", "--json", str(f))
    assert rc == 0 and sigs(rep)[0] == "nccl-cuda-999"
    assert any("binary" in w for w in rep["warnings"])


def test_truncated_gzip_reports_and_diagnoses_what_was_read(tmp_path: Path) -> None:
    body = ("step 1 loss 2.0\n" * 20000 + SEED_LINES + "padding line after the failure\n" * 200000).encode()
    data = gzip.compress(body)
    f = tmp_path / "run.log.gz"
    f.write_bytes(data[: int(len(data) * 0.8)])
    rc, rep, _ = triage("diagnose", "--json", str(f))
    assert rc == 0 and sigs(rep)[0] == "nccl-cuda-999"
    assert any("truncated" in w for w in rep["warnings"])


def test_gzip_and_zstd_and_stdin(tmp_path: Path) -> None:
    import zstandard

    body = ("hello\r\n" * 1000 + SEED_LINES.replace("\n", "\r\n")).encode()
    (tmp_path / "a.log.gz").write_bytes(gzip.compress(body))
    (tmp_path / "b.log.zst").write_bytes(zstandard.ZstdCompressor().compress(body))
    for f in ("a.log.gz", "b.log.zst"):
        rc, rep, _ = triage("diagnose", "--json", str(tmp_path / f))
        assert rc == 0 and sigs(rep)[0] == "nccl-cuda-999", f
        ev = rep["diagnoses"][0]["evidence"][0]
        assert ev["line"] == 1004 and not ev["text"].endswith("\r")
    rc, rep, _ = triage("diagnose", "--json", "-", stdin=gzip.compress(body))
    assert rc == 0 and sigs(rep)[0] == "nccl-cuda-999" and rep["diagnoses"][0]["evidence"][0]["source"] == "<stdin>"


def test_ten_megabyte_single_line(tmp_path: Path) -> None:
    f = tmp_path / "long.log"
    f.write_bytes(b"x" * (10 << 20) + b" Cuda failure 999 'unknown error' " + b"y" * (1 << 20) + b"\nnext\n")
    rc, rep, _ = triage("diagnose", "--json", str(f))
    assert rc == 0 and sigs(rep) == ["nccl-cuda-999"]
    ev = rep["diagnoses"][0]["evidence"][0]
    assert ev["line"] == 1 and len(ev["text"]) < 2000 and "Cuda failure 999" in ev["text"]


def test_non_utf8_and_ansi_colour(tmp_path: Path) -> None:
    f = tmp_path / "latin1.log"
    f.write_bytes(b"caf\xe9 \xff\xfe\n\x1b[31m[rank1]: Cuda failure 999 'unknown error'\x1b[0m\n")
    rc, rep, _ = triage("diagnose", "--json", str(f))
    assert rc == 0 and sigs(rep) == ["nccl-cuda-999"]
    ev = rep["diagnoses"][0]["evidence"][0]
    assert ev["line"] == 2 and ev["rank"] == 1 and "\x1b" not in ev["text"]


def test_directory_with_thousands_of_small_files(tmp_path: Path) -> None:
    d = tmp_path / "incident"
    d.mkdir()
    for i in range(3000):
        (d / f"rank-{i}.log").write_text(f"rank {i} step 10 loss 1.0\n")
    (d / "rank-1717.log").write_text("step 9\n" + SEED_LINES.replace("[rank0]", "[rank1717]"))
    rc, rep, _ = triage("diagnose", "--json", str(d))
    assert rc == 0 and sigs(rep)[0] == "nccl-cuda-999"
    assert rep["initiating"]["rank"] == 1717
    assert len(rep["sources"]) == 3000


def test_human_output_names_failure_rank_and_file_line(tmp_path: Path) -> None:
    f = tmp_path / "rank-3.log"
    f.write_text("hello\n" + SEED_LINES.replace("rank0", "rank3"))
    rc, out, _ = triage("diagnose", str(f))
    assert rc == 0
    assert out.splitlines()[0].startswith("nccl-cuda-999:")
    assert "rank 3" in out and f"{f}:5" in out and "Next action:" in out


def test_nothing_found_human_and_json(tmp_path: Path) -> None:
    f = tmp_path / "ok.log"
    f.write_text("step 1 loss 2.0\n")
    assert triage("diagnose", str(f))[1].startswith("No known failure")
    rc, rep, _ = triage("diagnose", "--json", str(f))
    assert rc == 0 and rep["diagnoses"] == [] and rep["initiating"] is None


@pytest.mark.parametrize("key", ["diagnoses", "initiating", "next_action", "missing_facts", "probes"])
def test_json_contract_keys(tmp_path: Path, key: str) -> None:
    f = tmp_path / "r.log"
    f.write_text(SEED_LINES)
    rc, rep, _ = triage("diagnose", "--json", str(f))
    assert key in rep
    d = rep["diagnoses"][0]
    for k in ("signature", "confidence", "downstream", "evidence", "causes"):
        assert k in d
    for k in ("source", "line", "text", "rank", "host"):
        assert k in d["evidence"][0]
    for k in ("id", "summary", "evidence_for", "evidence_against"):
        assert k in d["causes"][0]
    assert isinstance(rep["next_action"], str) and rep["next_action"]


def test_decompressed_size_budget_for_uploads() -> None:
    from bot.engine import diagnose_texts

    bomb = gzip.compress(b"A" * (64 << 20) + b"\n" + SEED_LINES.encode())
    rep = diagnose_texts([("upload.log.gz", bomb)], max_bytes=8 << 20, workers=1)
    assert rep.diagnoses == []
    assert any("first 8 MiB only" in w for w in rep.warnings)
    rep = diagnose_texts([("upload.log.gz", gzip.compress(SEED_LINES.encode()))], max_bytes=8 << 20, workers=1)
    assert rep.diagnoses[0].signature == "nccl-cuda-999" and rep.warnings == []


def test_concurrent_diagnoses_on_threads() -> None:
    from concurrent.futures import ThreadPoolExecutor

    from bot.engine import diagnose_texts

    text = ("step 1 loss 2.0\n" * 200000 + SEED_LINES) * 2

    def one(i: int) -> str:
        return diagnose_texts([(f"t{i}", text)], workers=1).diagnoses[0].signature

    with ThreadPoolExecutor(6) as ex:
        assert set(ex.map(one, range(12))) == {"nccl-cuda-999"}


def test_a_thousand_levels_deep_directory_is_a_warning_not_a_crash(tmp_path: Path) -> None:
    d = tmp_path / "deep"
    d.mkdir()
    (d / "rank-0.log").write_text(SEED_LINES)
    cur = d
    for _ in range(1000):  # deeper than the recursion limit of os.walk
        cur = cur / "d"
        cur.mkdir()
    (cur / "x.log").write_text("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    try:
        rc, rep, _ = triage("diagnose", "--json", str(d))
        assert rc == 0 and sigs(rep)[0] == "nccl-cuda-999"
        assert any("levels deep; not read" in w for w in rep["warnings"])
    finally:  # shutil.rmtree (pytest's clean-up) recurses too: take the tree down bottom-up
        (cur / "x.log").unlink()
        while cur != d:
            cur.rmdir()
            cur = cur.parent


def test_fifo_and_symlink_loop_inside_a_directory_are_skipped_and_said(tmp_path: Path) -> None:
    d = tmp_path / "incident"
    d.mkdir()
    (d / "rank-0.log").write_text(SEED_LINES)
    os.mkfifo(d / "pipe")  # reading it would block for ever
    (d / "self").symlink_to(d)
    rc, rep, _ = triage("diagnose", "--json", str(d))
    assert rc == 0 and sigs(rep)[0] == "nccl-cuda-999"
    assert any("pipe: a FIFO" in w for w in rep["warnings"])
    assert any("symlink loop" in w for w in rep["warnings"])


def test_dangling_or_looping_symlink_argument_says_so(tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    rc, _, err = triage("diagnose", "--json", str(tmp_path / "a"))
    assert rc == 2 and "symbolic link" in err


def test_a_device_that_never_ends_is_capped(tmp_path: Path) -> None:
    rc, rep, _ = triage("diagnose", "--json", "--max-bytes", "64M", "/dev/zero")
    assert rc == 0 and rep["diagnoses"] == []
    assert rep["stats"]["bytes"] == 64 << 20
    assert any("size limit" in w for w in rep["warnings"])


def test_total_byte_cap_names_what_was_left_out(tmp_path: Path) -> None:
    for r in range(4):
        (tmp_path / f"rank-{r}.log").write_text(SEED_LINES + "step 1 loss 2.0\n" * 30000)
    rc, rep, _ = triage("diagnose", "--json", "--max-bytes", "600K", str(tmp_path))
    assert rc == 0 and sigs(rep)[0] == "nccl-cuda-999"
    assert any("left out 2 file(s)" in w and "rank-3.log" in w for w in rep["warnings"])


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32"])
def test_utf16_and_utf32_logs_are_decoded(tmp_path: Path, encoding: str) -> None:
    # PowerShell's `python train.py > log.txt` writes UTF-16 LE with a BOM
    text = "Epoch 1\r\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.64 GiB\r\n"
    f = tmp_path / "train.log"
    f.write_bytes(text.encode(encoding))
    rc, rep, _ = triage("diagnose", "--json", str(f))
    assert rc == 0 and sigs(rep) == ["cuda-oom"]
    assert any("decoded as such" in w for w in rep["warnings"])
    gz = tmp_path / "train.log.gz"
    gz.write_bytes(gzip.compress(text.encode(encoding)))
    assert sigs(triage("diagnose", "--json", str(gz))[1]) == ["cuda-oom"]  # type: ignore[arg-type]


def test_truncated_zstd_is_reported(tmp_path: Path) -> None:
    zstandard = pytest.importorskip("zstandard")
    data = zstandard.ZstdCompressor().compress((SEED_LINES * 2000).encode())
    f = tmp_path / "rank-0.log.zst"
    f.write_bytes(data[: len(data) // 2])
    rc, rep, _ = triage("diagnose", "--json", str(f))
    assert rc == 0
    assert any("zstd stream is truncated" in w for w in rep["warnings"])


def test_a_hundred_megabyte_line_counts_as_one_line(tmp_path: Path) -> None:
    f = tmp_path / "one.log"
    with open(f, "wb") as fh:
        fh.write(b"x" * (100 << 20) + b"\n" + SEED_LINES.encode())
    rc, rep, _ = triage("diagnose", "--json", str(f))
    assert rc == 0 and sigs(rep)[0] == "nccl-cuda-999"
    assert rep["sources"][0]["lines"] == 1 + SEED_LINES.count("\n")
    cuda = [e for e in rep["diagnoses"][0]["evidence"] if "Cuda failure 999" in e["text"]]
    assert cuda and cuda[0]["line"] == 5  # the 100 MB line is line 1


def test_a_log_copied_out_of_a_web_page_keeps_its_html_entities_and_is_still_read() -> None:
    # forum and issue pages hand out "Cuda failure &#39;out of memory&#39;"; a newline entity stays as it is,
    # so that evidence line numbers are those of the file
    page = (b"step 10 loss 2.1 &#10; lr 1e-4\n"
            b"gpu-node-3:12:40 [5] NCCL WARN Cuda failure &#39;out of memory&#39;\n"
            b"RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, unhandled cuda error, "
            b"NCCL version 2.21.5\n")
    rc, out, _ = triage("diagnose", "--json", "-", stdin=page)
    assert rc == 0 and isinstance(out, dict)
    top = out["diagnoses"][0]
    assert top["signature"] == "nccl-unhandled-cuda-error"
    lines = {e["line"]: e["text"] for e in top["evidence"]}
    assert "Cuda failure 'out of memory'" in lines[2]


def test_a_log_passed_through_a_mail_or_chat_client_is_still_read() -> None:
    # no-break spaces for every space and typographic quotes, as rich-text clients hand a pasted log on
    log = ("gpu-node-3:12:40 [5] NCCL WARN Cuda failure 'out of memory'\n"
           "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, unhandled cuda error\n")
    pasted = log.replace(" ", "\u00a0").replace("'", "\u2019").encode()
    rc, out, _ = triage("diagnose", "--json", "-", stdin=pasted)
    assert rc == 0 and isinstance(out, dict)
    assert out["diagnoses"][0]["signature"] == "nccl-unhandled-cuda-error"
    assert "Cuda failure 'out of memory'" in out["diagnoses"][0]["evidence"][0]["text"]


def test_an_indented_traceback_behind_a_quote_or_timestamp_prefix_is_still_read() -> None:
    tb = ("      Traceback (most recent call last):\n"
          "        File \"/opt/megatron/model/gpt_model.py\", line 203, in universal_checkpoint_info\n"
          "      AttributeError: 'GPTModel' object has no attribute '_get_tp_replicated_param_patterns'\n")
    for prefix in ("> ", "2024-03-01T10:00:00.123456789Z stderr F "):
        quoted = "".join(prefix + line for line in tb.splitlines(True)).encode()
        rc, out, _ = triage("diagnose", "--json", "-", stdin=quoted)
        assert rc == 0 and isinstance(out, dict)
        assert [d["signature"] for d in out["diagnoses"]][:1] == ["python-exception"], prefix
