"""Files that others read: written whole or not at all, durable before they are published.

The one place for fsync, atomic replacement and the advisory locks that keep two runs of one
command from writing the same output.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from sealift.errors import SealiftError


def fsync_path(path: Path) -> None:
    """fsync a file or a folder (a folder: so a rename or a new entry in it survives a crash)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, content: bytes) -> None:
    """Write ``content`` to ``path`` via a temporary name, fsync and rename."""
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with temporary.open("wb") as handle:
        handle.write(content)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    fsync_path(path.parent)


def exclusive_lock(path: Path, busy: SealiftError) -> int:
    """Take a non-blocking exclusive lock on ``path``; raise ``busy`` if another process has it.

    The lock dies with the process, so a run killed with -9 never leaves a stale lock behind.
    """
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise busy from None
    return fd
