"""The bot's upload path: memory and time for one dense gzip upload. Prints figures, asserts nothing.

A real bot (the Bolt app behind `triage serve`'s HTTP server, in this process) is sent a Slack
message sharing a `.log.gz`; the stand-in Slack Web API (tests/support) serves the file. The log is
one of scan_bench's profiles (default all-matches: every line an NCCL WARN, ~50 failures near the
end), so its compressed size is small and its decompressed matches dense: before issue 11, a 142 KB
upload of this kind took the bot to 1.9 GB.

Figures: the process's RSS before the upload, its peak while the bot downloads, decompresses,
diagnoses and answers (sampled every 10 ms), and the time from the event to the answer.
Run: .venv/bin/python bench/upload_bench.py [--size-mb 100] [--mix all-matches]
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.bot_server import CHANNEL, run_bot  # noqa: E402
from tests.support.slack_requests import message_event  # noqa: E402
from tests.support.slack_standin import SlackStandIn  # noqa: E402


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _scan_bench():  # noqa: ANN202 - the module
    spec = importlib.util.spec_from_file_location("scan_bench", ROOT / "bench" / "scan_bench.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=100, help="decompressed size of the uploaded log")
    ap.add_argument("--mix", choices=["all-matches", "init-heavy", "real-chatter"], default="all-matches")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="triage-upload-bench-"))
    log = tmp / "job.log"
    _scan_bench().generate_mix(log, args.size_mb << 20, args.mix)
    gz = gzip.compress(log.read_bytes(), 6)
    print(f"upload: {len(gz) / 1e6:.1f} MB gzip of a {log.stat().st_size / 1e6:.0f} MB {args.mix} log")
    log.unlink()

    with SlackStandIn() as slack, run_bot(slack, tmp, env={"TRIAGE_MAX_UPLOAD_MB": "2048"}) as bot:
        base = _rss_kib()
        peak = base
        stop = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not stop.is_set():
                peak = max(peak, _rss_kib())
                time.sleep(0.01)

        th = threading.Thread(target=sample, daemon=True)
        th.start()
        f = slack.add_file(gz, "job.log.gz", mimetype="application/gzip", filetype="gzip")
        t0 = time.monotonic()
        status, _ = bot.send_event(message_event(CHANNEL, "our job died", files=[f]))
        post = slack.wait_for("chat.postMessage", timeout=600)[0]
        took = time.monotonic() - t0
        bot.wait_idle(600)
        stop.set()
        th.join()
    first = post.params.get("text", "").splitlines()[0][:100] if post.params.get("text") else ""
    print(f"event {status}; answer after {took:.1f} s: {first}")
    print(f"bot process RSS: {base / 1024:.0f} MB before, peak {peak / 1024:.0f} MB "
          f"(+{(peak - base) / 1024:.0f} MB for the upload)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
