#!/usr/bin/env python3
"""Build the node agent's own distribution from the one node_agent/ folder of this source tree.

    python3 deploy/agent/build.py wheel            # dist/gpu_triage_agent-<v>-py3-none-any.whl
    python3 deploy/agent/build.py zipapp           # dist/node-agent-<v>.pyz: one file, nvidia-ml-py inside
    python3 deploy/agent/build.py wheel zipapp --out DIR [--nvml-wheel WHL | --no-nvml]

`wheel` copies node_agent/, LICENSE, deploy/agent/pyproject.toml and README.md into a staging
directory and runs `pip wheel` there (setuptools comes from the package index, as for any build).
`zipapp` packs node_agent/ and pynvml.py (taken from an nvidia-ml-py wheel: --nvml-wheel, else
`pip download` of the floor the agent declares) with `python -m zipapp`; run it as
`python3 node-agent-<v>.pyz serve ...` on any Python >= 3.8. Standard library only.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PACKAGE = ROOT / "node_agent"
MAIN = "import sys\n\nfrom node_agent.cli import main\n\nsys.exit(main())\n"


def version() -> str:
    m = re.search(r"""^__version__\s*=\s*["']([^"']+)["']""", (PACKAGE / "__init__.py").read_text(encoding="utf-8"), re.M)
    if not m:
        raise SystemExit("node_agent/__init__.py has no __version__")
    return m.group(1)


def nvml_requirement() -> str:
    """The agent's declared nvidia-ml-py requirement (deploy/agent/pyproject.toml), e.g. 'nvidia-ml-py>=13.580.65'."""
    m = re.search(r'"(nvidia-ml-py[^"]*)"', (HERE / "pyproject.toml").read_text(encoding="utf-8"))
    if not m:
        raise SystemExit("deploy/agent/pyproject.toml does not declare nvidia-ml-py")
    return m.group(1)


def _copy_package(dest: Path) -> None:
    shutil.copytree(str(PACKAGE), str(dest / "node_agent"),
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo"))


def _run(cmd: list[str], cwd: Path | None = None) -> None:
    p = subprocess.run(cmd, cwd=str(cwd) if cwd else None, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if p.returncode != 0:
        raise SystemExit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout.decode(errors='replace')[-4000:]}")


def build_wheel(out: Path, work: Path) -> Path:
    stage = work / "wheel-src"
    stage.mkdir()
    _copy_package(stage)
    for src, name in ((HERE / "pyproject.toml", "pyproject.toml"), (HERE / "README.md", "README.md"),
                      (ROOT / "LICENSE", "LICENSE")):
        shutil.copy(str(src), str(stage / name))
    before = set(out.glob("gpu_triage_agent-*.whl"))
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(out), str(stage)])
    made = [p for p in out.glob(f"gpu_triage_agent-{version()}-*.whl") if p not in before] or \
        sorted(out.glob(f"gpu_triage_agent-{version()}-*.whl"))
    if not made:
        raise SystemExit(f"pip wheel made no gpu_triage_agent wheel in {out}")
    return made[0]


def _fetch_nvml_wheel(work: Path) -> Path:
    # Exactly the floor: the oldest release the agent is tested with, and the same bytes on every build.
    pin = nvml_requirement().replace(">=", "==")
    d = work / "nvml"
    _run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--dest", str(d), pin])
    found = sorted(d.glob("nvidia_ml_py-*.whl"))
    if not found:
        raise SystemExit(f"pip download {pin} gave no wheel")
    return found[0]


def build_zipapp(out: Path, work: Path, nvml_wheel: Path | None, with_nvml: bool) -> Path:
    stage = work / "zipapp"
    stage.mkdir()
    _copy_package(stage)
    (stage / "__main__.py").write_text(MAIN, encoding="utf-8")
    if with_nvml:
        whl = nvml_wheel or _fetch_nvml_wheel(work)
        with zipfile.ZipFile(str(whl)) as zf:
            names = zf.namelist()
            if "pynvml.py" not in names:
                raise SystemExit(f"{whl} holds no pynvml.py")
            (stage / "pynvml.py").write_bytes(zf.read("pynvml.py"))
            # nvidia-ml-py's licence (BSD) travels with the copy of its code.
            for n in names:
                if n.endswith((".dist-info/LICENSE", ".dist-info/licenses/LICENSE.txt", ".dist-info/LICENSE.txt")):
                    (stage / "LICENSE.nvidia-ml-py").write_bytes(zf.read(n))
    shutil.copy(str(ROOT / "LICENSE"), str(stage / "LICENSE"))
    target = out / f"node-agent-{version()}.pyz"
    _run([sys.executable, "-m", "zipapp", str(stage), "--output", str(target), "--python", "/usr/bin/env python3",
          "--compress"])
    return target


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", nargs="+", choices=("wheel", "zipapp"))
    ap.add_argument("--out", type=Path, default=ROOT / "dist", help="output directory (default dist/)")
    ap.add_argument("--nvml-wheel", type=Path, help="nvidia-ml-py wheel to take pynvml.py from (default: pip download)")
    ap.add_argument("--no-nvml", action="store_true", help="zipapp without pynvml (the host has nvidia-ml-py)")
    args = ap.parse_args(argv)
    if args.nvml_wheel and not args.nvml_wheel.is_file():
        ap.error(f"--nvml-wheel {args.nvml_wheel}: no such file")
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="agent-build-") as tmp:
        for what in dict.fromkeys(args.what):
            if what == "wheel":
                print(build_wheel(args.out.resolve(), Path(tmp)))
            else:
                print(build_zipapp(args.out.resolve(), Path(tmp), args.nvml_wheel, not args.no_nvml))
    return 0


if __name__ == "__main__":
    sys.exit(main())
