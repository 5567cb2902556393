"""The signature library: YAML files under signatures/<family>/<id>.yaml, loaded and compiled.

Loading validates every file against signatures/schema.json and collects every problem with its
file (a broken library is reported in one run, never one error at a time).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import regex
import yaml

from .literals import LiteralError, required_literals, sre_parse

CACHE_VERSION = 5  # bump when the cached document format changes
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when available: ~10x faster
VERIFY_TIMEOUT_S = 0.5  # per regex call: a pathological pattern cannot hang a scan
REGEX_FLAGS = regex.ASCII | regex.VERSION0  # ASCII \b and \w, as hyperscan and `rg (?-u)` see them


@dataclass(frozen=True, slots=True)
class Problem:
    file: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.message}"


@dataclass(slots=True)
class Condition:
    kind: str  # finding | probe_ok | signature | fact | capture | text
    value: str
    pattern: str | None = None  # compiled on first use: most causes are never weighed (lint compiles all)
    where: dict[str, Any] = field(default_factory=dict)
    weight: float = 1.0
    note: str | None = None
    _compiled: regex.Pattern[str] | None = field(default=None, repr=False, compare=False)

    @property
    def matches(self) -> regex.Pattern[str] | None:
        if self.pattern is not None and self._compiled is None:
            self._compiled = compile_regex(self.pattern, ignorecase=True)
        return self._compiled

    def describe(self) -> str:
        if self.note:
            return self.note
        if self.kind == "finding":
            return f"probe finding {self.value}" + (f" {self.where}" if self.where else "")
        if self.kind == "probe_ok":
            return f"probe {self.value} clean"
        if self.kind == "signature":
            return f"signature {self.value} also present"
        if self.kind == "fact":
            return f"fact {self.value}" + (f" ~ /{self.matches.pattern}/" if self.matches else "")
        if self.kind == "capture":
            return f"{self.value}" + (f" ~ /{self.matches.pattern}/" if self.matches else "")
        return f"log text /{self.value}/"


@dataclass(slots=True)
class Cause:
    id: str
    summary: str
    prior: float
    confirmed_by: list[Condition]
    ruled_out_by: list[Condition]
    action_text: str
    action_command: str | None


@dataclass(slots=True)
class MissingFact:
    id: str
    question: str
    unless: list[Condition]


@dataclass(slots=True)
class Pattern:
    signature: str
    name: str
    source: str
    literals: list[str]
    ignorecase: bool
    role: str
    sources: frozenset[str]
    min_count: int
    index: int = -1  # position in Library.patterns
    context: str | None = None  # must also match the lines around the hit (8 before, 3 after)
    echo_after: tuple[str, ...] = ()  # a line of this pattern printed after one of these is its echo
    # "xid" / "sxid": the capture holding a code; a line that nothing rates (catalogue, Fatal word) only supports
    rated_code: str | None = None
    _compiled: regex.Pattern[str] | None = None
    _context: regex.Pattern[str] | None = None

    @property
    def anchored(self) -> bool:
        """Whether the regex anchors to a line start or end (then it must see the prefix-free message,
        without the markdown bold a reporter put around the line)."""
        return "^" in self.source or "$" in self.source

    @property
    def context_regex(self) -> regex.Pattern[str] | None:
        if self.context and self._context is None:
            self._context = compile_regex(self.context, ignorecase=True)
        return self._context

    @property
    def compiled(self) -> regex.Pattern[str]:
        # compiled on first use: most patterns never meet a candidate line, and compiling all
        # of them would cost a third of a small paste's diagnosis
        if self._compiled is None:
            self._compiled = compile_regex(self.source, self.ignorecase)
        return self._compiled


@dataclass(slots=True)
class Signature:
    id: str
    title: str
    family: str
    severity: str
    downstream: bool
    priority: int
    confidence: float
    summary: str
    parent: str | None
    status: str
    secondary_to: list[str]
    echo_after: list[str]
    patterns: list[Pattern]
    excludes: list[tuple[regex.Pattern[str], str]]  # (pattern, scope: line|context)
    causes: list[Cause]
    missing_facts: list[MissingFact]
    probes: list[dict[str, Any]]
    references: list[str]
    tests: dict[str, list[str]]
    path: str


@dataclass(slots=True)
class Library:
    signatures: dict[str, Signature]
    patterns: list[Pattern]
    problems: list[Problem]
    root: str

    def fingerprint(self) -> str:
        import hashlib

        h = hashlib.sha256()
        for p in self.patterns:
            h.update(f"{p.signature}\0{p.name}\0{p.ignorecase}\0{'|'.join(p.literals)}\n".encode())
        return h.hexdigest()[:16]


# The folder signatures/ installs as this package (setup.py): `signatures` is taken on PyPI.
SIGNATURES_PACKAGE = "gpu_triage_signatures"


def default_root() -> Path:
    """The bundled library: the installed package, else the checkout's signatures/ next to bot/."""
    try:
        return Path(str(resources.files(SIGNATURES_PACKAGE)))
    except ModuleNotFoundError:  # a checkout used without `pip install` (PYTHONPATH=.)
        return Path(__file__).resolve().parents[2] / "signatures"


def _schema() -> dict[str, Any]:
    return json.loads((default_root() / "schema.json").read_text(encoding="utf-8"))


def compile_regex(pattern: str, ignorecase: bool = False) -> regex.Pattern[str]:
    return regex.compile(pattern, REGEX_FLAGS | (regex.IGNORECASE if ignorecase else 0))


def check_syntax(pattern: str, ignorecase: bool = False) -> None:
    """Raise regex.error if `pattern` does not compile; the stdlib parser answers most patterns
    in a quarter of the time `regex` takes to compile them, and only its failures go to `regex`."""
    try:
        sre_parse.parse(pattern)
    except Exception:
        compile_regex(pattern, ignorecase)


def _condition(raw: dict[str, Any], default_weight: float) -> Condition:
    for kind in ("finding", "probe_ok", "signature", "fact", "capture", "text"):
        if kind in raw:
            matches = raw.get("matches")
            if kind == "text":
                matches = raw["text"]
            return Condition(
                kind=kind,
                value=str(raw[kind]),
                pattern=str(matches) if matches else None,
                where=dict(raw.get("where") or {}),
                weight=float(raw.get("weight", default_weight)),
                note=raw.get("note"),
            )
    raise ValueError(f"condition names no kind: {raw}")


def _check_patterns(doc: dict[str, Any], path: str, problems: list[Problem]) -> bool:
    """Compile every regex and derive its literals once, at validation time (the result is cached)."""
    ok = True
    for raw in doc["patterns"]:
        ignorecase = bool(raw.get("ignorecase", False))
        where = f"pattern {raw['name']!r}"
        # Literal extraction parses the regex (stdlib parser); compiling it with `regex` as well
        # costs half of a cold load, so that happens only where the parse says nothing (an explicit
        # `literal`, a parse error) and in `triage signatures lint`, which compiles everything.
        try:
            if raw.get("context"):
                compile_regex(raw["context"], ignorecase=True)
            if raw.get("literal"):
                check_syntax(raw["regex"], ignorecase)
        except regex.error as exc:
            problems.append(Problem(path, f"{where}: regex does not compile: {exc}"))
            ok = False
            continue
        if raw.get("literal"):
            # a string, or a list when every match contains one of several strings (alternatives)
            given = raw["literal"] if isinstance(raw["literal"], list) else [raw["literal"]]
            literals = [lit.lower() if ignorecase else lit for lit in given]
        else:
            try:
                literals = required_literals(raw["regex"], ignorecase)
            except LiteralError as exc:
                try:
                    compile_regex(raw["regex"], ignorecase)
                except regex.error as cexc:
                    problems.append(Problem(path, f"{where}: regex does not compile: {cexc}"))
                else:
                    problems.append(Problem(path, f"{where}: {exc}"))
                ok = False
                continue
        for lit in literals:
            if not lit.isascii():
                problems.append(Problem(path, f"{where}: literal {lit!r} is not ASCII"))
                ok = False
        raw["_literals"] = literals
    return ok


def _build(doc: dict[str, Any], path: str, problems: list[Problem]) -> Signature | None:
    sig_id = doc["id"]
    patterns: list[Pattern] = []
    for raw in doc["patterns"]:
        if "_literals" not in raw:
            continue
        patterns.append(
            Pattern(
                signature=sig_id,
                name=raw["name"],
                source=raw["regex"],
                literals=raw["_literals"],
                ignorecase=bool(raw.get("ignorecase", False)),
                role=raw.get("role", "primary"),
                sources=frozenset(raw.get("sources") or ["any"]),
                min_count=int(raw.get("min_count", 1)),
                context=raw.get("context"),
                echo_after=tuple(raw.get("echo_after") or ()),
                rated_code=raw.get("rated_code"),
            )
        )
    excludes = []
    for raw in doc.get("exclude") or []:
        try:
            excludes.append(
                (compile_regex(raw["regex"], bool(raw.get("ignorecase"))), raw.get("scope", "line"))
            )
        except regex.error as exc:
            problems.append(Problem(path, f"exclude {raw['regex']!r}: regex does not compile: {exc}"))
    causes = []
    for raw in doc["causes"]:
        try:
            causes.append(
                Cause(
                    id=raw["id"],
                    summary=raw["summary"],
                    prior=float(raw.get("prior", 0.5)),
                    confirmed_by=[_condition(c, 1.0) for c in raw.get("confirmed_by") or []],
                    ruled_out_by=[_condition(c, 1.0) for c in raw.get("ruled_out_by") or []],
                    action_text=raw["next_action"]["text"],
                    action_command=raw["next_action"].get("command"),
                )
            )
        except regex.error as exc:
            problems.append(Problem(path, f"cause {raw['id']!r}: condition regex does not compile: {exc}"))
    missing = []
    for raw in doc.get("missing_facts") or []:
        try:
            missing.append(
                MissingFact(raw["id"], raw["question"], [_condition(c, 1.0) for c in raw.get("unless") or []])
            )
        except regex.error as exc:
            problems.append(Problem(path, f"missing fact {raw['id']!r}: regex does not compile: {exc}"))
    if not patterns:
        return None
    return Signature(
        id=sig_id,
        title=doc["title"],
        family=doc["family"],
        severity=doc["severity"],
        downstream=bool(doc["downstream"]),
        priority=int(doc.get("priority", 50)),
        confidence=float(doc.get("confidence", 0.8)),
        summary=doc["summary"].strip(),
        parent=doc.get("parent"),
        status=doc.get("status", "stable"),
        secondary_to=list(doc.get("secondary_to") or []),
        echo_after=list(doc.get("echo_after") or []),
        patterns=patterns,
        excludes=excludes,
        causes=causes,
        missing_facts=missing,
        probes=list(doc.get("probes") or []),
        references=list(doc["references"]),
        tests={k: list(v or []) for k, v in (doc.get("tests") or {}).items()},
        path=path,
    )


def _cache_key(base: Path, files: list[Path]) -> str:
    import hashlib

    h = hashlib.sha256(f"{CACHE_VERSION}\0{base}".encode())
    for p in [*files, default_root() / "schema.json"]:
        st = p.stat()
        h.update(f"{p}\0{st.st_mtime_ns}\0{st.st_size}\n".encode())
    return h.hexdigest()[:24]


def _validated_docs(base: Path, files: list[Path], problems: list[Problem]) -> list[tuple[str, Path, dict[str, Any]]]:
    """Parse and schema-check every file; the result is cached on disk (keyed by file mtimes and
    sizes), so a warm start skips YAML parsing and jsonschema entirely."""
    import pickle

    from .backends import cache_dir

    cache = cache_dir() / f"library-{_cache_key(base, files)}.pickle"
    try:
        docs, cached_problems = pickle.loads(cache.read_bytes())
        problems.extend(cached_problems)
        return [(rel, base / rel, doc) for rel, doc in docs]
    except Exception:  # missing or unreadable cache: validate afresh
        pass
    import jsonschema

    validator = jsonschema.Draft202012Validator(_schema())
    out: list[tuple[str, Path, dict[str, Any]]] = []
    mine: list[Problem] = []
    for path in files:
        rel = str(path.relative_to(base))
        try:
            doc = yaml.load(path.read_text(encoding="utf-8"), Loader=_YAML_LOADER)
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            mine.append(Problem(rel, f"not valid YAML: {exc}"))
            continue
        if not isinstance(doc, dict):
            mine.append(Problem(rel, "not a mapping"))
            continue
        errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
        for err in errors:
            loc = "/".join(str(p) for p in err.absolute_path) or "(top)"
            mine.append(Problem(rel, f"schema: {loc}: {err.message}"))
        if not errors:
            _check_patterns(doc, rel, mine)
            out.append((rel, path, doc))
    problems.extend(mine)
    try:
        import os
        import tempfile

        cache.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache.parent, prefix=".lib-")
        with os.fdopen(fd, "wb") as fh:
            pickle.dump(([(rel, doc) for rel, _p, doc in out], mine), fh)
        os.replace(tmp, cache)
    except OSError:
        pass
    return out


HANDLED_FILE = "handled.yaml"


def _handled_lines(base: Path, problems: list[Problem]) -> list[regex.Pattern[str]]:
    """The library-wide vetoes of `handled.yaml`: every signature ignores a line one of them matches."""
    path = base / HANDLED_FILE
    if not path.exists():
        return []
    try:
        doc = yaml.load(path.read_text(encoding="utf-8"), Loader=_YAML_LOADER)
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        problems.append(Problem(HANDLED_FILE, f"not valid YAML: {exc}"))
        return []
    entries = doc.get("handled") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        problems.append(Problem(HANDLED_FILE, "needs a list under 'handled'"))
        return []
    out: list[regex.Pattern[str]] = []
    for i, raw in enumerate(entries):
        where = f"handled[{i}]"
        if not isinstance(raw, dict) or set(raw) - {"name", "regex", "note", "examples"} or not all(
                isinstance(raw.get(k), str) and raw.get(k) for k in ("name", "regex", "note")):
            problems.append(Problem(HANDLED_FILE, f"{where}: needs name, regex and note (strings), examples, nothing else"))
            continue
        examples = raw.get("examples")
        if not isinstance(examples, list) or not examples or not all(isinstance(e, str) for e in examples):
            problems.append(Problem(HANDLED_FILE, f"{where} {raw['name']}: needs examples, real lines it silences"))
            continue
        try:
            compiled = compile_regex(raw["regex"])
        except regex.error as exc:
            problems.append(Problem(HANDLED_FILE, f"{where} {raw['name']}: regex does not compile: {exc}"))
            continue
        for line in examples:
            if not compiled.search(line):
                problems.append(Problem(HANDLED_FILE, f"{where} {raw['name']}: regex misses its example {line[:80]!r}"))
        out.append(compiled)
    return out


def load_library(root: str | Path | None = None, strict: bool = False) -> Library:
    """Load every signature under `root` (default: the packaged library).

    Problems are collected, not raised; with strict=True a library with problems raises ValueError.
    """
    base = Path(root) if root else default_root()
    files = sorted(p for p in base.rglob("*.yaml") if p.parent != base and not p.name.startswith("_"))
    problems: list[Problem] = []
    signatures: dict[str, Signature] = {}
    for rel, path, doc in _validated_docs(base, files, problems):
        if doc["id"] != path.stem:
            problems.append(Problem(rel, f"id {doc['id']!r} differs from the file name {path.stem!r}"))
        if doc["family"] != path.parent.name:
            problems.append(Problem(rel, f"family {doc['family']!r} differs from its folder {path.parent.name!r}"))
        if doc["id"] in signatures:
            problems.append(Problem(rel, f"duplicate id {doc['id']!r} (also {signatures[doc['id']].path})"))
            continue
        sig = _build(doc, rel, problems)
        if sig is not None:
            signatures[sig.id] = sig
    handled = _handled_lines(base, problems)
    patterns: list[Pattern] = []
    for sig in signatures.values():
        sig.excludes.extend((h, "line") for h in handled)
        for pat in sig.patterns:
            pat.index = len(patterns)
            patterns.append(pat)
    lib = Library(signatures=signatures, patterns=patterns, problems=problems, root=str(base))
    if strict and problems:
        raise ValueError("signature library has problems:\n" + "\n".join(map(str, problems)))
    return lib


_DEFAULT: Library | None = None


def default_library() -> Library:
    """The packaged library, loaded once per process."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = load_library()
    return _DEFAULT
