"""Lint and self-test the signature library; every problem is reported with its file.

`lint` checks meaning beyond the JSON schema (which `load_library` already applies): taxonomy
coverage, cross-references, test counts. `run_tests` runs every signature's own match / no-match
lines through the real engine (literal scan, regex, exclusions), so a test passes only if the
shipped scanner would really find the line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import regex
import yaml

from .catalog import DERIVED_CAPTURES
from .library import Library, Problem, Signature, default_root

MIN_MATCH = 3
MIN_NO_MATCH = 2


def taxonomy_ids(path: Path | None = None) -> dict[str, dict]:
    p = path or default_root() / "taxonomy.yaml"
    if not p.exists():
        return {}
    doc = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    return {s["id"]: s for s in doc.get("signatures", [])}


def _known_finding_codes() -> set[str] | None:
    try:
        from node_agent.findings import FINDING_CODES  # stdlib-only constants, no agent machinery
    except Exception:
        return None
    from .pasted import PASTED_CODES  # codes only pasted command outputs give (ulimit)

    return set(FINDING_CODES) | set(PASTED_CODES)


def _compile_all(sig: Signature) -> list[Problem]:
    """Loading compiles regexes lazily; lint compiles every one (patterns, cause conditions)."""
    out = []
    for pat in sig.patterns:
        try:
            pat.compiled  # noqa: B018 - compiling is the check
        except regex.error as exc:
            out.append(Problem(sig.path, f"pattern {pat.name!r}: regex does not compile: {exc}"))
    conds = [(c.id, x) for c in sig.causes for x in (*c.confirmed_by, *c.ruled_out_by)]
    conds += [(m.id, x) for m in sig.missing_facts for x in m.unless]
    for owner, cond in conds:
        try:
            cond.matches  # noqa: B018
        except regex.error as exc:
            out.append(Problem(sig.path, f"{owner!r}: condition regex {cond.pattern!r} does not compile: {exc}"))
    return out


def lint(library: Library, taxonomy: dict[str, dict] | None = None) -> list[Problem]:
    problems = list(library.problems)
    from .catalog import CATALOG_FILE, catalog_problems

    problems += [Problem(CATALOG_FILE, p) for p in catalog_problems()]
    tax = taxonomy if taxonomy is not None else taxonomy_ids()
    ids = set(library.signatures)
    families = {s.family for s in library.signatures.values()}
    codes = _known_finding_codes()
    for tid, entry in tax.items():
        if tid not in ids:
            problems.append(Problem("taxonomy.yaml", f"taxonomy id {tid!r} has no signature file"))
        else:
            sig = library.signatures[tid]
            if sig.family != entry.get("family"):
                problems.append(Problem(sig.path, f"family {sig.family!r} differs from the taxonomy's {entry.get('family')!r}"))
            if bool(entry.get("downstream", False)) != sig.downstream:
                problems.append(Problem(sig.path, f"downstream: {sig.downstream} differs from the taxonomy"))
    for sig in library.signatures.values():
        f = sig.path
        t = sig.tests
        if len(t.get("match", [])) < MIN_MATCH:
            problems.append(Problem(f, f"needs at least {MIN_MATCH} tests.match lines (has {len(t.get('match', []))})"))
        if len(t.get("no_match", [])) < MIN_NO_MATCH:
            problems.append(Problem(f, f"needs at least {MIN_NO_MATCH} tests.no_match lines (has {len(t.get('no_match', []))})"))
        names = [p.name for p in sig.patterns]
        for dup in {n for n in names if names.count(n) > 1}:
            problems.append(Problem(f, f"pattern name {dup!r} used twice"))
        if not any(p.role == "primary" for p in sig.patterns):
            problems.append(Problem(f, "no primary pattern: a signature made only of supporting patterns never fires"))
        problems += _compile_all(sig)
        if sig.parent and sig.parent not in ids:
            problems.append(Problem(f, f"parent {sig.parent!r} is not a signature"))
        for ref in sig.secondary_to:
            if ref == "*":
                continue
            if ref.startswith("family:"):
                if ref[7:] not in families:
                    problems.append(Problem(f, f"secondary_to {ref!r}: no signature has that family"))
            elif ref not in ids:
                problems.append(Problem(f, f"secondary_to {ref!r} is not a signature"))
        for ref in sig.echo_after:
            if ref not in ids or ref == sig.id:
                problems.append(Problem(f, f"echo_after {ref!r} is not another signature"))
        for pat in sig.patterns:
            for ref in pat.echo_after:
                if ref not in ids or ref == sig.id:
                    problems.append(Problem(f, f"pattern {pat.name!r}: echo_after {ref!r} is not another signature"))
            if pat.rated_code and pat.rated_code not in pat.compiled.groupindex:
                problems.append(Problem(f, f"pattern {pat.name!r}: rated_code {pat.rated_code!r} but the regex captures no such group"))
        cause_ids = [c.id for c in sig.causes]
        for dup in {c for c in cause_ids if cause_ids.count(c) > 1}:
            problems.append(Problem(f, f"cause id {dup!r} used twice"))
        conds = [(c.id, x) for c in sig.causes for x in (*c.confirmed_by, *c.ruled_out_by)]
        conds += [(m.id, x) for m in sig.missing_facts for x in m.unless]
        for owner, cond in conds:
            if cond.kind == "signature" and cond.value not in ids:
                problems.append(Problem(f, f"{owner}: condition names unknown signature {cond.value!r}"))
            if cond.kind == "finding" and codes is not None and cond.value not in codes:
                problems.append(Problem(f, f"{owner}: condition names unknown probe finding {cond.value!r}"))
            captured = cond.value if cond.value not in DERIVED_CAPTURES else DERIVED_CAPTURES[cond.value]
            if cond.kind == "capture" and not any(captured in p.compiled.groupindex for p in sig.patterns):
                problems.append(Problem(f, f"{owner}: no pattern captures {cond.value!r}"))
    return problems


@dataclass
class TestFailure:
    signature: str
    file: str
    kind: str  # match | no_match | todo_match | todo_no_match
    text: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.kind}: {self.message}: {self.text[:160]!r}"


def fired(library: Library, text: str, backend: str | None = None) -> set[str]:
    """The signatures the full engine finds in `text` (one test item; may hold several lines)."""
    from . import diagnose_texts

    report = diagnose_texts([("test-line", text)], library=library, backend=backend, workers=1)
    return {d.signature for d in report.diagnoses}


def run_tests(library: Library, only: set[str] | None = None, backend: str | None = None) -> tuple[int, list[TestFailure]]:
    failures: list[TestFailure] = []
    count = 0
    for sig in library.signatures.values():
        if only and sig.id not in only:
            continue
        t = sig.tests
        cases = [("match", x, True) for x in t.get("match", [])]
        cases += [("no_match", x, False) for x in t.get("no_match", [])]
        # known gaps: they must still fail, so a fixed gap is noticed and promoted
        cases += [("todo_match", x, False) for x in t.get("todo_match", [])]
        cases += [("todo_no_match", x, True) for x in t.get("todo_no_match", [])]
        for kind, text, want in cases:
            count += 1
            got = sig.id in fired(library, text, backend)
            if got != want:
                if kind.startswith("todo"):
                    msg = "known gap now passes: move it to " + kind[5:]
                else:
                    msg = "did not match" if want else "matched but must not"
                failures.append(TestFailure(sig.id, sig.path, kind, text, msg))
    return count, failures
