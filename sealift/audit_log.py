"""The audit log: one JSON line per thing install did, for the people who must answer for it.

What was pushed, mounted, skipped or uploaded, where, with which digest, and when. Appended and
flushed line by line, so a killed run still leaves an accurate record of what it finished.
Never holds a secret: callers pass names, digests and sizes only.
"""

from __future__ import annotations

import datetime
import json
import os
import threading
from pathlib import Path
from typing import Any

from sealift.errors import ResourceError


class AuditLog:
    """An append-only JSON-lines file; safe to write from several threads."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        try:
            self._handle = path.open("a", encoding="utf-8") if path is not None else None
        except OSError as bad:
            raise ResourceError(
                f"audit log {path} cannot be written ({bad.strerror})",
                hint="pass --audit-log with a writable path",
            ) from bad
        self.records: list[dict[str, Any]] = []

    def record(self, action: str, **fields: Any) -> None:
        """Write one event with a UTC timestamp."""
        entry = {
            "time": datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds"),
            "action": action,
            **fields,
        }
        with self._lock:
            self.records.append(entry)
            if self._handle is not None:
                self._handle.write(json.dumps(entry, sort_keys=True) + "\n")
                self._handle.flush()
                os.fsync(self._handle.fileno())

    def close(self) -> None:
        """Close the file."""
        with self._lock:
            if self._handle is not None:
                self._handle.close()
                self._handle = None
