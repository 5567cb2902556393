"""Open the SQLite file: WAL (readers never block the writer), a busy timeout, migrations applied."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from sqlite_utils import Database

from .migrations import migrations


class StoreError(Exception):
    """The store cannot be opened (bad path, unwritable directory, not a SQLite file)."""


def open_db(path: str | os.PathLike[str]) -> Database:
    """Open (creating if needed) and migrate. `:memory:` works for throwaway use."""
    p = str(path)
    if p != ":memory:":
        parent = Path(p).expanduser().resolve().parent
        if not parent.is_dir():
            raise StoreError(f"TRIAGE_DB {p}: directory {parent} does not exist")
    try:
        # One connection shared by the worker threads behind the Store's lock: check_same_thread
        # off, and isolation left to sqlite-utils (atomic() issues BEGIN/COMMIT itself).
        conn = sqlite3.connect(p, check_same_thread=False, timeout=30)
        db = Database(conn)
        if p != ":memory:":
            db.enable_wal()
        db.execute("PRAGMA busy_timeout = 30000")
        db.execute("PRAGMA foreign_keys = ON")
        db.execute("PRAGMA synchronous = NORMAL")  # safe with WAL; fsync at checkpoints only
        migrations.apply(db)
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"TRIAGE_DB {p}: {exc}") from exc
    return db
