"""Signing, owners from cgroups, kernel-log parsing, configuration precedence."""

from __future__ import annotations

import hashlib
import hmac
import json
import os

import pytest

from node_agent.auth import AuthError, ReplayCache, SecretFileError, load_secret, sign, verify
from node_agent.cgroups import owner_from_cgroup
from node_agent.config import ConfigError, load_config, parse_listen
from node_agent.findings import FINDING_CODES, Finding
from node_agent.kernel_log import _parse_dmesg, _parse_journal, parse_kmsg_record

SECRET = b"s3cret"


def test_signature_is_hmac_sha256_over_v1_timestamp_body():
    # The exact construction other components (bot, Slurm webhook) must reproduce.
    expected = hmac.new(SECRET, b"v1:1700000000:" + b'{"a":1}', hashlib.sha256).hexdigest()
    assert sign(SECRET, "1700000000", b'{"a":1}') == f"v1={expected}"


def test_verify_accepts_once_and_rejects_replay_and_skew():
    cache = ReplayCache()
    sig = sign(SECRET, "1700000000", b"{}")
    assert verify(SECRET, "1700000000", sig, b"{}", now=1700000100, replay_cache=cache) is True
    with pytest.raises(AuthError, match="replayed"):
        verify(SECRET, "1700000000", sig, b"{}", now=1700000101, replay_cache=cache)
    with pytest.raises(AuthError, match="window"):
        verify(SECRET, "1700000000", sig, b"{}", now=1700000301)
    with pytest.raises(AuthError, match="mismatch"):
        verify(SECRET, "1700000000", sig, b"{ }", now=1700000000)
    with pytest.raises(AuthError, match="mismatch"):
        verify(SECRET, "1700000000", "v1=" + "0" * 64, b"{}", now=1700000000)


def test_replay_cache_forgets_expired_signatures():
    cache = ReplayCache()
    for i in range(2000):
        cache.check_and_remember(f"sig{i}", expires_at=100, now=50)
    cache.check_and_remember("late", expires_at=500, now=200)  # prunes everything that expired at 100
    assert len(cache) < 1100


def test_load_secret_strips_and_checks_mode(tmp_path):
    p = tmp_path / "s"
    p.write_text("abc \n")
    os.chmod(p, 0o640)
    assert load_secret(p) == b"abc"
    os.chmod(p, 0o604)
    with pytest.raises(SecretFileError, match="world-readable"):
        load_secret(p)
    with pytest.raises(SecretFileError, match="cannot read"):
        load_secret(tmp_path / "missing")


@pytest.mark.parametrize(
    ("cgroup", "label", "job"),
    [
        ("0::/system.slice/slurmstepd.scope/job_1234/step_0/user/task_0\n", "slurm job 1234", "1234"),
        ("0::/system.slice/gpu7_slurmstepd.scope/job_77/step_batch/user/task_0\n", "slurm job 77", "77"),
        ("12:devices:/slurm/uid_1000/job_555/step_0\n4:memory:/slurm/uid_1000/job_555/step_0\n", "slurm job 555", "555"),
        ("0::/system.slice/docker-" + "ab" * 32 + ".scope\n", "container " + "ab" * 6, None),
        ("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b2c3d4e_5f60_7182_93a4_b5c6d7e8f901.slice/"
         "cri-containerd-" + "cd" * 32 + ".scope\n", "container " + "cd" * 6, None),
        ("0::/user.slice/user-1000.slice/session-3.scope\n", "systemd session-3.scope", None),
        ("", "unknown", None),
    ],
)
def test_owner_from_cgroup(cgroup, label, job):
    owner = owner_from_cgroup(cgroup)
    assert owner.label() == label and owner.slurm_job == job


def test_kubernetes_pod_uid_is_kept():
    owner = owner_from_cgroup("0::/kubepods.slice/kubepods-pod1b2c3d4e_5f60_7182_93a4_b5c6d7e8f901.slice/"
                              "cri-containerd-" + "cd" * 32 + ".scope")
    assert owner.pod_uid == "1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901"


def test_kmsg_record_parsing():
    rec = parse_kmsg_record("3,1234,5000000,-;NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.", 1000.0)
    assert rec.time == 1005.0 and rec.prio == 3 and rec.text.startswith("NVRM: Xid")
    assert parse_kmsg_record(" SUBSYSTEM=pci", 0) is None  # continuation line
    assert parse_kmsg_record("garbage", 0) is None


def test_journal_and_dmesg_fallback_parsers():
    (j,) = _parse_journal("1718000000.250000 gpu-node-7 kernel: NVRM: Xid (PCI:0000:3b:00): 48, pid=1, DBE\n")
    assert j.time == 1718000000.25 and j.text.startswith("NVRM: Xid")
    (d,) = _parse_dmesg("2024-06-10T06:13:20,250000+00:00 NVRM: Xid (PCI:0000:3b:00): 48, DBE\n")
    assert d.time == 1718000000.25 and d.text == "NVRM: Xid (PCI:0000:3b:00): 48, DBE"


def test_config_precedence_file_env_cli(tmp_path):
    cfg = tmp_path / "a.json"
    cfg.write_text(json.dumps({"listen": "10.0.0.1:1000", "max_concurrent": 2, "disk_paths": ["/data"]}))
    c = load_config(str(cfg), env={"NODE_AGENT_MAX_CONCURRENT": "3", "NODE_AGENT_DISK_PATHS": "/a,/b"})
    assert (c.listen, c.max_concurrent, c.disk_paths) == ("10.0.0.1:1000", 3, ["/a", "/b"])
    c = load_config(str(cfg), env={}, listen="127.0.0.9:9477")
    assert c.listen_addr() == ("127.0.0.9", 9477)
    with pytest.raises(ConfigError, match="not a valid int"):
        load_config(None, env={"NODE_AGENT_MAX_CONCURRENT": "many"})
    with pytest.raises(ConfigError, match="ADDR:PORT"):
        parse_listen("localhost")
    assert parse_listen("[::1]:9477") == ("::1", 9477)


def test_finding_codes_are_a_closed_set():
    assert len(FINDING_CODES) == len(set(FINDING_CODES))
    with pytest.raises(ValueError, match="unknown finding code"):
        Finding("foreign-proccess", "typo")


def test_every_finding_code_is_documented():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "node-agent.md").read_text()
    missing = [c for c in FINDING_CODES if f"| `{c}` |" not in doc]
    assert not missing, f"codes missing from docs/node-agent.md: {missing}"
