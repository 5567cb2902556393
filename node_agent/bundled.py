"""The package's data folders (scenarios/, data/) as real directories, also when the agent runs from a zipapp.

Inside a zipapp (deploy/agent/build.py zipapp) the package lies in an archive that open(), glob() and
the NVML worker cannot read by path, so the folder is unpacked once into a private temporary
directory. The directory is handed to child processes (the NVML worker) in an environment variable,
so they reuse it instead of unpacking their own copy, and only the process that made it removes it.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
import zipfile
from pathlib import Path, PurePosixPath

HERE = Path(__file__).resolve().parent
_ENV = "_NODE_AGENT_UNPACKED"  # "<dir>": where this process tree unpacked the archive's data folders
_lock = threading.Lock()
_cache: dict[str, Path] = {}


def data_dir(name: str) -> Path:
    """node_agent/<name>: the folder itself, or its unpacked copy when the package sits in a zip archive."""
    plain = HERE / name
    if plain.is_dir():
        return plain
    archive, inner = _archive_of(HERE)
    if archive is None:
        return plain  # a broken install: callers report the missing files as they always did
    with _lock:
        if name not in _cache:
            _cache[name] = _unpack(archive, f"{inner}/{name}/", _root() / name)
        return _cache[name]


def _archive_of(path: Path) -> tuple[Path | None, str]:
    for parent in path.parents:
        if parent.is_file():
            if zipfile.is_zipfile(parent):
                return parent, path.relative_to(parent).as_posix()
            break
    return None, ""


def _root() -> Path:
    inherited = os.environ.get(_ENV, "")
    if inherited and Path(inherited).is_dir():
        return Path(inherited)
    root = Path(tempfile.mkdtemp(prefix="node-agent-data-"))
    atexit.register(shutil.rmtree, str(root), True)
    os.environ[_ENV] = str(root)  # inherited by the NVML worker, which must not unpack (or remove) its own
    return root


def _unpack(archive: Path, prefix: str, dest: Path) -> Path:
    if dest.is_dir():  # the parent process unpacked it already
        return dest
    part = dest.with_name(f"{dest.name}.part{os.getpid()}")
    with zipfile.ZipFile(str(archive)) as zf:
        for member in zf.namelist():
            if not member.startswith(prefix) or member.endswith("/"):
                continue
            rel = PurePosixPath(member[len(prefix):])
            if rel.is_absolute() or ".." in rel.parts:
                continue  # our own archive never holds these; a tampered one must not write outside dest
            target = part.joinpath(*rel.parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(zf.read(member))
    part.mkdir(parents=True, exist_ok=True)
    try:
        part.rename(dest)
    except OSError:  # another thread or process got there first: theirs is as good as ours
        shutil.rmtree(str(part), ignore_errors=True)
    return dest
