"""The OCI images built here (deploy/images/build.sh) start and answer: the bot against the Slack stand-in,
the agent with --simulate. Slow (a Debian root is downloaded) and root only: runs with TRIAGE_IMAGE_TEST=1.

Each image is unpacked with umoci into an OCI runtime bundle and its process (args, env, user from
the image config, as a container runtime would take them) is started with chroot on the host's
network: this machine's sandbox refuses the setrlimit that podman/crun need, and chroot runs the
same root filesystem and command. Measured here: build 71 s for both, unpack about 7 s each.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest

from node_agent import __version__

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("TRIAGE_IMAGE_TEST") != "1", reason="set TRIAGE_IMAGE_TEST=1 (builds images)"),
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mmdebstrap, umoci, chroot)"),
]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "node_agent"))


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    for tool in ("mmdebstrap", "umoci"):
        if not shutil.which(tool):
            pytest.fail(f"{tool} is missing: apt-get install mmdebstrap umoci", pytrace=False)
    out = tmp_path_factory.mktemp("images")
    t0 = time.monotonic()
    p = subprocess.run([str(ROOT / "deploy" / "images" / "build.sh"), str(out)], capture_output=True, text=True,
                       timeout=1500)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    print(f"[images] both built in {time.monotonic() - t0:.0f}s")
    return {n: out / f"{n}-{__version__}.oci.tar" for n in ("gpu-triage", "node-agent")}


def _bundle(archive: Path, dest: Path) -> tuple[Path, dict[str, Any]]:
    layout = dest / "layout"
    layout.mkdir(parents=True)
    with tarfile.open(archive) as tar:
        tar.extractall(layout)
    t0 = time.monotonic()
    subprocess.run(["umoci", "unpack", "--image", f"{layout}:{__version__}", str(dest / "bundle")], check=True,
                   capture_output=True, timeout=300)
    print(f"[images] {archive.name} unpacked in {time.monotonic() - t0:.1f}s")
    spec = json.loads((dest / "bundle" / "config.json").read_text())
    return dest / "bundle" / "rootfs", spec["process"]


def _start(rootfs: Path, process: dict[str, Any], extra_args: list[str], extra_env: dict[str, str],
           log: Path) -> subprocess.Popen[bytes]:
    user = f"{process['user']['uid']}:{process['user']['gid']}"
    env = [*process["env"], *(f"{k}={v}" for k, v in extra_env.items())]
    with open(log, "wb") as fh:
        return subprocess.Popen(["chroot", f"--userspec={user}", str(rootfs), "/usr/bin/env", "-i", *env,
                                 *process["args"], *extra_args], stdout=fh, stderr=subprocess.STDOUT,
                                cwd=process.get("cwd", "/"))


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()


def _own(path: Path, mode: int) -> Path:
    os.chown(path, 10001, 10001)
    path.chmod(mode)
    return path


def test_agent_image_answers_a_signed_probe_with_simulate(images: dict[str, Path], tmp_path: Path) -> None:
    import agent_http

    rootfs, process = _bundle(images["node-agent"], tmp_path)
    assert process["user"]["uid"] == 10001 and process["args"][:3] == ["python3", "-m", "node_agent"]
    secret = rootfs / "tmp" / "agent.secret"
    secret.write_text(agent_http.SECRET + "\n")
    _own(secret, 0o600)
    log = tmp_path / "agent.log"
    t0 = time.monotonic()
    proc = _start(rootfs, process, ["serve", "--simulate", "xid79-gpu-lost", "--listen", "127.0.0.1:0",
                                    "--secret-file", "/tmp/agent.secret"], {}, log)
    try:
        end = time.monotonic() + 60
        while not (m := re.search(r"listening on (http://[\d.]+:\d+)", log.read_text(errors="replace"))):
            assert proc.poll() is None and time.monotonic() < end, log.read_text(errors="replace")
            time.sleep(0.1)
        print(f"[images] agent image listening after {time.monotonic() - t0:.1f}s")
        body = json.dumps({"probes": ["xid"], "nonce": os.urandom(8).hex()}).encode()
        status, answer = agent_http.request(m.group(1), "POST", "/v1/probe", body, agent_http.signed(body))
        assert status == 200, answer
        xid = next(r for r in answer["results"] if r["probe"] == "xid")
        assert any(f.get("xid") == 79 and f["gpu"] == 3 for f in xid["findings"])
    finally:
        _stop(proc)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_bot_image_answers_a_pasted_failure_through_the_slack_stand_in(images: dict[str, Path], tmp_path: Path) -> None:
    from tests.support.bot_server import CHANNEL, SIGNING_SECRET, WEBHOOK_SECRET
    from tests.support.slack_requests import event_body, message_event, post_signed
    from tests.support.slack_standin import SlackStandIn

    rootfs, process = _bundle(images["gpu-triage"], tmp_path)
    assert process["args"][:3] == ["python3", "-m", "bot"]
    data = rootfs / "tmp" / "triage"  # the image's /tmp/triage: what a volume would be
    data.mkdir()
    _own(data, 0o700)
    (data / "webhook.secret").write_bytes(WEBHOOK_SECRET)
    _own(data / "webhook.secret", 0o600)
    port = _free_port()
    log = tmp_path / "bot.log"
    text = (ROOT / "examples" / "seed-nccl-999" / "rank-0.log").read_text(errors="replace")[-3500:]
    with SlackStandIn() as slack:
        env = {"SLACK_BOT_TOKEN": slack.bot_token, "SLACK_SIGNING_SECRET": SIGNING_SECRET,
               "SLACK_API_URL": slack.api_url, "TRIAGE_DB": "/tmp/triage/triage.db", "TRIAGE_CHANNEL": CHANNEL,
               "TRIAGE_CACHE_DIR": "/tmp/triage/cache", "TRIAGE_WEBHOOK_SECRET_FILE": "/tmp/triage/webhook.secret"}
        t0 = time.monotonic()
        proc = _start(rootfs, process, ["serve", "--http", "--host", "127.0.0.1", "--port", str(port)], env, log)
        try:
            end = time.monotonic() + 90
            while True:
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=1):
                        break
                except OSError:
                    assert proc.poll() is None and time.monotonic() < end, log.read_text(errors="replace")
                    time.sleep(0.2)
            print(f"[images] bot image serving after {time.monotonic() - t0:.1f}s")
            status, _ = post_signed(f"http://127.0.0.1:{port}/slack/events",
                                    event_body(message_event(CHANNEL, text)), SIGNING_SECRET)
            assert status == 200
            posts = slack.wait_for("chat.postMessage", timeout=60,
                                   where=lambda c: "nccl" in json.dumps(c.params).lower())
            assert posts, log.read_text(errors="replace")
            print(f"[images] pasted failure answered by the image after {time.monotonic() - t0:.1f}s")
        finally:
            _stop(proc)
