#!/usr/bin/env python3
"""Print a pip constraints file pinning every declared `>=` floor: the oldest versions we claim to work with.

    python3 .ci/min_versions.py [pyproject.toml] [--extra test] > floors.txt
    pip install -c floors.txt -e '.[test]'

Every requirement of [project].dependencies (and of the named optional groups) with a `>=` bound
becomes `name==bound`, its environment marker kept, so the install gets exactly the floor where the
requirement applies. A requirement without a lower bound is an error: an unstated floor is untested.
.ci/run installs these and runs the fast tests (the "true floors" step).
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path

# name [extras] (specifiers) [; marker]: PEP 508 without URLs, which pyproject here never uses
_REQ = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*([^;]*?)\s*(?:;\s*(.+))?$")


def floors(requirements: list[str]) -> list[str]:
    out = []
    for req in requirements:
        m = _REQ.match(req)
        if not m:
            raise SystemExit(f"cannot read requirement {req!r}")
        name, _extras, spec, marker = m.groups()
        lows = [s.strip()[2:].strip() for s in spec.split(",") if s.strip().startswith(">=")]
        if len(lows) != 1:
            raise SystemExit(f"requirement {req!r} has no single '>=' floor: state the oldest version it works with")
        line = f"{name}=={lows[0]}"
        out.append(f"{line}; {marker.strip()}" if marker else line)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pyproject", nargs="?", type=Path, default=Path(__file__).resolve().parents[1] / "pyproject.toml")
    ap.add_argument("--extra", action="append", default=[], help="optional-dependency group to include too")
    args = ap.parse_args(argv)
    project = tomllib.loads(args.pyproject.read_text(encoding="utf-8"))["project"]
    reqs = list(project.get("dependencies", []))
    for extra in args.extra:
        try:
            reqs += project["optional-dependencies"][extra]
        except KeyError:
            raise SystemExit(f"{args.pyproject}: no optional-dependencies group {extra!r}") from None
    print(f"# floors of {args.pyproject.name} ({', '.join(['dependencies', *args.extra])}): .ci/min_versions.py")
    print("\n".join(floors(reqs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
