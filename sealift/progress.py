"""The one progress reporter: byte bars on a terminal, periodic lines in a log, JSON for machines.

Library code asks for a :class:`ProgressTask` and calls ``update(n)`` from any thread; how that is
shown is decided once, by the CLI, from whether stderr is a terminal and from ``--json``.
Progress and notes go to stderr so stdout stays the command's result.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, TextIO

from sealift.units import format_bytes

LOG_INTERVAL_SECONDS = 5.0


class ProgressTask:
    """One long step measured in bytes. Thread-safe; use as a context manager."""

    def __init__(self, reporter: Progress, label: str, total: int) -> None:
        self._reporter = reporter
        self.label = label
        self.total = total
        self.done = 0
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._last_emit = self._started
        self._bar: Any = None
        if reporter.mode == "tty":
            # Imported here: tqdm costs a noticeable share of a short command's start-up.
            from tqdm import tqdm

            self._bar = tqdm(
                total=total,
                desc=label,
                unit="B",
                unit_scale=True,
                unit_divisor=1024,
                file=reporter.stream,
                dynamic_ncols=True,
                leave=True,
            )
        elif reporter.mode in ("log", "json"):
            self._emit("start")

    def update(self, count: int) -> None:
        """Record ``count`` more bytes done."""
        with self._lock:
            self.done += count
            if self._bar is not None:
                self._bar.update(count)
                return
            now = time.monotonic()
            if now - self._last_emit >= self._reporter.interval:
                self._last_emit = now
                self._emit("progress")

    def _emit(self, event: str) -> None:
        elapsed = max(time.monotonic() - self._started, 1e-9)
        rate = self.done / elapsed
        if self._reporter.mode == "json":
            record = {
                "event": event,
                "step": self.label,
                "bytes": self.done,
                "total": self.total,
                "seconds": round(elapsed, 3),
            }
            self._reporter.write(json.dumps(record, sort_keys=True))
            return
        if self._reporter.mode != "log":
            return
        if event == "start":
            line = f"{self.label}: started, {format_bytes(self.total)} to go"
        elif event == "end":
            line = (
                f"{self.label}: done, {format_bytes(self.done)} in {elapsed:.1f}s"
                f" ({format_bytes(rate)}/s)"
            )
        else:
            percent = 100.0 * self.done / self.total if self.total else 100.0
            eta = (self.total - self.done) / rate if rate > 0 else 0.0
            line = (
                f"{self.label}: {format_bytes(self.done)} of {format_bytes(self.total)}"
                f" ({percent:.0f}%), {format_bytes(rate)}/s, ETA {eta:.0f}s"
            )
        self._reporter.write(line)

    def close(self) -> None:
        """Finish the step: close the bar or print the last line."""
        with self._lock:
            if self._bar is not None:
                self._bar.close()
                self._bar = None
            elif self._reporter.mode in ("log", "json"):
                self._emit("end")

    def __enter__(self) -> ProgressTask:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class Progress:
    """Where and how progress is shown. ``mode`` is tty, log, json or quiet."""

    mode: str = "quiet"
    stream: TextIO = field(default_factory=lambda: sys.stderr)
    interval: float = LOG_INTERVAL_SECONDS
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def for_cli(cls, *, json_output: bool, quiet: bool) -> Progress:
        """Pick the mode from the flags and from whether stderr is a terminal."""
        if quiet:
            return cls(mode="quiet")
        if json_output:
            return cls(mode="json")
        return cls(mode="tty" if sys.stderr.isatty() else "log")

    def task(self, label: str, total: int) -> ProgressTask:
        """Start a step of ``total`` bytes."""
        return ProgressTask(self, label, total)

    def note(self, message: str, *, level: str = "info") -> None:
        """A line for the person running the command: a warning, a skipped item, a decision."""
        if self.mode == "quiet" and level != "warning":
            return
        if self.mode == "json":
            self.write(json.dumps({"event": level, "message": message}, sort_keys=True))
        elif self.mode == "tty":
            from tqdm import tqdm

            tqdm.write(f"{level}: {message}" if level != "info" else message, file=self.stream)
        else:
            self.write(f"{level}: {message}" if level != "info" else message)

    def write(self, line: str) -> None:
        """Write one whole line; parallel workers never interleave inside a line."""
        with self._lock:
            self.stream.write(line + "\n")
            self.stream.flush()
