"""The redaction corpus (tests/data/secrets/corpus.py): every kind is removed, nothing that only
looks like a secret is, redacting twice changes nothing, and redaction never changes what the
engine finds in a real failure log (the bot diagnoses the redacted text of a paste).

Also the CLI: `triage diagnose` prints evidence redacted in both outputs unless `--no-redact`."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from bot.engine import diagnose_paths
from bot.redact import MASK, redact_text
from tests.data.secrets.corpus import CLEAN, CORPUS

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
SEED = ROOT / "examples" / "seed-nccl-999" / "rank-0.log"


def test_the_corpus_is_broad() -> None:
    kinds = [k for k, _, _ in CORPUS]
    assert len(set(kinds)) == len(kinds) >= 60


@pytest.mark.parametrize("kind, text, secrets", CORPUS, ids=[k for k, _, _ in CORPUS])
def test_every_kind_is_redacted(kind: str, text: str, secrets: list[str]) -> None:
    assert all(s in text for s in secrets), "the corpus entry must hold its own secret"
    out = redact_text(text)
    for s in secrets:
        assert s not in out.text, f"{kind}: {s!r} survived in {out.text!r}"
    assert out.count >= 1 and MASK in out.text
    again = redact_text(out.text)
    assert again.text == out.text and again.count == 0, "redacting twice must change nothing"


def test_one_secret_counts_once() -> None:
    # GITHUB_TOKEN=ghp_…: two rules see it (the prefix and the NAME=value form), one secret was removed.
    assert redact_text(CORPUS[[k for k, _, _ in CORPUS].index("github-classic")][1]).count == 1
    assert redact_text("\n".join(t for _, t, _ in CORPUS)).count <= len(CORPUS) + 3


@pytest.mark.parametrize("line", CLEAN)
def test_lookalikes_stay(line: str) -> None:
    assert redact_text(line).text == line


def _texts() -> list[tuple[str, str]]:
    out = []
    for base in (DATA / "realcases", DATA / "healthy", ROOT / "examples"):
        for f in sorted(base.rglob("*")):
            if not f.is_file() or f.name == "meta.yaml" or f.name.startswith("."):
                continue
            data = f.read_bytes()
            if f.suffix == ".gz":
                data = gzip.decompress(data)
            out.append((str(f.relative_to(ROOT)), data.decode("utf-8", "replace")))
    return out


def test_real_logs_lose_nothing() -> None:
    """The 700+ real failure logs, the healthy corpus and the examples carry no secret: redaction must
    leave them byte for byte as they are (so the engine matches exactly what it matched before)."""
    texts = _texts()
    assert len(texts) >= 700
    changed = {name: redact_text(t).kinds for name, t in texts if redact_text(t).count}
    assert not changed, f"redaction changed real logs (false positives): {changed}"


def _leaky_log(tmp_path: Path, entries: list[tuple[str, str, list[str]]] = CORPUS, name: str = "rank-0.log") -> Path:
    """The seed incident with corpus entries on its decisive lines and in an env dump before it."""
    lines = SEED.read_text().splitlines()
    out = ["+ env | sort", *(t for _, t, _ in entries)]
    for i, (_, text, _) in enumerate(entries):
        # each secret also on a failure line (flattened: one log line), so it lands in the evidence
        out.append(f"[rank{i}]: Cuda failure 999 'unknown error' (attempt {i}: {text.replace(chr(10), ' ')})")
    path = tmp_path / name
    path.write_text("\n".join(out + lines) + "\n")
    return path


def test_redaction_does_not_change_the_diagnosis(tmp_path: Path) -> None:
    raw = _leaky_log(tmp_path)
    red = tmp_path / "red" / "rank-0.log"
    red.parent.mkdir()
    red.write_text(redact_text(raw.read_text()).text)
    a, b = diagnose_paths([str(raw)], workers=1), diagnose_paths([str(red)], workers=1)
    assert [d.signature for d in a.diagnoses] == [d.signature for d in b.diagnoses] != []
    assert a.diagnoses[0].evidence_count == b.diagnoses[0].evidence_count
    assert (a.initiating.rank, a.initiating.host) == (b.initiating.rank, b.initiating.host)


def _triage(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[str, str]:
    from bot.cli.main import main

    capsys.readouterr()
    assert main(["diagnose", "--workers", "1", *args]) == 0
    out = capsys.readouterr()
    return out.out, out.err


CHUNK = 12  # the JSON lists 20 evidence lines per diagnosis: a dozen secrets per log all reach it


def test_cli_redacts_text_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shown_raw: list[str] = []
    for n in range(0, len(CORPUS), CHUNK):
        entries = CORPUS[n:n + CHUNK]
        log = _leaky_log(tmp_path, entries, f"chunk-{n}.log")
        text, _ = _triage(capsys, str(log))
        js, js_err = _triage(capsys, "--json", str(log))
        raw, raw_err = _triage(capsys, "--json", "--no-redact", str(log))
        assert json.loads(js)["diagnoses"][0]["signature"] == "nccl-cuda-999"
        assert MASK in js and MASK in text
        leaked_text = [k for k, _, secrets in entries if any(s in text for s in secrets)]
        leaked_json = [k for k, _, secrets in entries if any(s in js for s in secrets)]
        assert not leaked_text, f"secrets in the CLI text: {leaked_text}"
        assert not leaked_json, f"secrets in the CLI --json: {leaked_json}"
        assert "secret(s) in the logs shown as [REDACTED]" in js_err and "--no-redact" in js_err
        assert "REDACTED" not in raw_err
        shown_raw += [k for k, _, secrets in entries if all(s in raw for s in secrets)]
    # the control: without redaction the same output carries every one (so the checks above mean something)
    assert len(shown_raw) == len(CORPUS), sorted({k for k, _, _ in CORPUS} - set(shown_raw))


def test_cli_clean_log_says_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    out, err = _triage(capsys, str(SEED))
    assert "REDACTED" not in out + err
