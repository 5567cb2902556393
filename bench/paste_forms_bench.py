"""The real cases in the forms a log takes on its way to us. Prints figures, asserts nothing.

A log reaches the bot copied out of a web page (HTML entities), a mail or chat client (no-break
spaces, typographic quotes), a quote in an issue, a log viewer with a line-number gutter, Docker's
json-file or the CRI format of Kubernetes nodes, a journal, a CI runner's timestamps, or a terminal
that hard-wrapped it. For a sample of tests/data/realcases (those named right as they are), each
form is applied to the whole log and the cases whose top diagnosis changes are counted and listed.

Run: .venv/bin/python bench/paste_forms_bench.py [--sample 400] [--seed 1] [FORM ...]
"""

from __future__ import annotations

import argparse
import html
import json
import random
import sys
from collections.abc import Callable
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bot.engine import diagnose_texts  # noqa: E402


def _each_line(prefix: str) -> Callable[[str], str]:
    return lambda t: "".join(prefix + line for line in t.splitlines(True))


def _wrap(width: int) -> Callable[[str], str]:
    return lambda t: "\n".join(line[i:i + width] for line in t.splitlines()
                               for i in range(0, max(len(line), 1), width)) + "\n"


FORMS: dict[str, Callable[[str], str]] = {
    "html-entities": lambda t: html.escape(t, quote=True),
    "no-break-spaces": lambda t: t.replace(" ", "\u00a0"),
    "typographic-quotes": lambda t: t.replace("'", "\u2019").replace('"', "\u201d"),
    "markdown-quote": _each_line("> "),
    "indented": _each_line("    "),
    "line-numbers": lambda t: "".join(f"{i + 1:>4}  {line}" for i, line in enumerate(t.splitlines(True))),
    "docker-json": lambda t: "".join(json.dumps({"log": line, "stream": "stderr", "time": "2024-03-01T10:00:00.1Z"})
                                     + "\n" for line in t.splitlines(True)),
    "cri": _each_line("2024-03-01T10:00:00.123456789Z stderr F "),
    "journal": _each_line("Mar 01 10:00:00 gpu-node-7 python3[4242]: "),
    "ci-timestamps": _each_line("2024-03-01T10:00:00.1234567Z "),
    "crlf": lambda t: t.replace("\n", "\r\n"),
    "wrapped-100": _wrap(100),
}


def _top(text: str) -> str:
    r = diagnose_texts([("log.txt", text)], workers=1).to_dict()
    return r["diagnoses"][0]["signature"] if r["diagnoses"] else "none"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("forms", nargs="*", choices=[[], *FORMS], default=[])
    ap.add_argument("--sample", type=int, default=400)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    cases = []
    for d in sorted((ROOT / "tests/data/realcases").iterdir()):
        meta = yaml.safe_load((d / "meta.yaml").read_text())
        logs = [f for f in d.iterdir() if f.name != "meta.yaml"]
        if "eval" in meta or meta.get("label") in (None, "none") or len(logs) != 1:
            continue
        cases.append((d.name, meta["label"], logs[0].read_text(errors="replace")))
    random.Random(args.seed).shuffle(cases)
    right = [(n, lab, t) for n, lab, t in cases[:args.sample] if _top(t) == lab]
    print(f"{len(right)} of {min(args.sample, len(cases))} sampled real cases named right as they are")
    for name in args.forms or FORMS:
        lost = [(n, lab, got) for n, lab, t in right if (got := _top(FORMS[name](t))) != lab]
        shown = ", ".join(f"{n} ({lab} -> {got})" for n, lab, got in lost[:6])
        print(f"{name:>18}: {len(right) - len(lost)} kept, {len(lost)} lost{': ' + shown if lost else ''}", flush=True)


if __name__ == "__main__":
    main()
