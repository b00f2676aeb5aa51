"""Writes a bundle as a directory: an OCI image layout plus sealift's files.

Blobs are written under a work folder on the same filesystem, fsynced, and renamed into
``blobs/sha256`` only once their digest is verified, so a blob at its final name is always
complete: an interrupted create re-runs and keeps them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import BinaryIO

from sealift.bundles import layout
from sealift.durable_files import exclusive_lock, fsync_path, write_atomically
from sealift.errors import InputError, ResourceError
from sealift.hashing import CopyResult, Sink, copy_stream, sha256_bytes

# Room for top-level files and filesystem overhead on top of the blobs themselves.
SPACE_MARGIN = 16 * 1024 * 1024


class DirectoryWriter:
    """A :class:`BundleWriter` into a folder; blobs may be written from several threads."""

    concurrent = True

    def __init__(self, root: Path, *, tmpdir: Path | None = None) -> None:
        self.root = root
        if root.exists() and not root.is_dir():
            raise InputError(f"output {root} exists and is not a folder", hint="choose another -o")
        if (root / layout.BUNDLE_MANIFEST_FILE).exists():
            # A finished bundle is replaced only deliberately: remove it first.
            raise InputError(
                f"output {root} already holds a finished bundle",
                hint="remove it or choose another -o; an interrupted create is resumed",
            )
        if root.exists() and any(root.iterdir()) and not (root / layout.BLOBS_DIR).is_dir():
            raise InputError(
                f"output {root} is a folder that is not empty and not a bundle",
                hint="choose a new or empty folder for -o",
            )
        self.blobs = root / layout.BLOBS_DIR
        self.blobs.mkdir(parents=True, exist_ok=True)
        self._lock = self._take_lock()
        parent = self._work_parent(tmpdir)
        # Partial blobs of a run killed with -9: only this output's, and only under the lock.
        prefix = "create-" + hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:12] + "-"
        for stale in parent.glob(prefix + "*"):
            shutil.rmtree(stale, ignore_errors=True)
        self.work = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
        self._cache_lock = threading.Lock()
        self._cache_path = self.root / layout.WORK_DIR / "source-digests.json"
        self._cache_path.parent.mkdir(exist_ok=True)
        self._source_digests: dict[str, str] = {}
        with contextlib.suppress(OSError, ValueError):
            self._source_digests = dict(json.loads(self._cache_path.read_text()))
        if os.stat(self.work).st_dev != os.stat(self.blobs).st_dev:
            self._cleanup()
            raise InputError(
                f"--tmpdir {tmpdir} is on another filesystem than {root}",
                hint="put --tmpdir on the output's filesystem so blobs are renamed, not copied",
            )

    def _source_key(self, path: Path, size: int) -> str | None:
        try:
            info = path.stat()
        except OSError:
            return None
        if info.st_size != size:
            return None
        return f"{path.resolve()}|{info.st_size}|{info.st_mtime_ns}|{info.st_ino}"

    def remembered_digest(self, path: Path, size: int) -> str | None:
        """The digest an interrupted run computed for an unchanged local file, if any.

        Keyed by path, size, mtime and inode as rsync and git do, so a resumed create does not
        read a 140 GB model again to find out which of its blobs are already in place.
        """
        key = self._source_key(path, size)
        return self._source_digests.get(key) if key else None

    def remember_digest(self, path: Path, size: int, digest: str) -> None:
        """Record a local file's digest for a resumed run (kept only until the bundle is done)."""
        key = self._source_key(path, size)
        if key is None:
            return
        with self._cache_lock:
            self._source_digests[key] = digest
            write_atomically(self._cache_path, json.dumps(self._source_digests).encode())

    def _take_lock(self) -> int:
        """One create per output folder at a time."""
        return exclusive_lock(
            self.root / f"{layout.WORK_DIR}.lock",
            InputError(
                f"another sealift create is writing to {self.root}",
                hint="wait for it to finish, or stop it before starting again",
            ),
        )

    def _work_parent(self, tmpdir: Path | None) -> Path:
        parent = tmpdir if tmpdir is not None else self.root / layout.WORK_DIR
        parent.mkdir(parents=True, exist_ok=True)
        return parent

    def _final(self, digest: str) -> Path:
        return self.root / layout.blob_name(digest)

    def has_blob(self, digest: str, size: int) -> bool:
        try:
            return self._final(digest).stat().st_size == size
        except FileNotFoundError:
            return False

    def bytes_needed(self, sizes: Sequence[tuple[str | None, int]]) -> int:
        seen: set[str] = set()
        total = SPACE_MARGIN
        for digest, size in sizes:
            if digest is not None:
                if digest in seen or self.has_blob(digest, size):
                    continue
                seen.add(digest)
            total += size
        return total

    def check_space(self, needed: int) -> None:
        """Refuse to start when the output filesystem cannot hold ``needed`` more bytes."""
        free = shutil.disk_usage(self.root).free
        if free < needed:
            raise ResourceError(
                f"output {self.root} has {free} bytes free, the bundle needs {needed} more",
                hint="free some space or write the bundle elsewhere (-o)",
            )

    def write_blob(
        self,
        source: BinaryIO,
        *,
        digest: str | None,
        size: int,
        what: str,
        data_name: str | None = None,
        extra_sinks: Sequence[Sink] = (),
        on_bytes: Callable[[int], None] | None = None,
    ) -> CopyResult:
        # The temporary name must outlive the handle: it is renamed after the digest checks out.
        handle = tempfile.NamedTemporaryFile(dir=self.work, prefix="blob-", delete=False)  # noqa: SIM115
        temporary = Path(handle.name)
        try:
            with handle:
                result = copy_stream(
                    source,
                    (handle, *extra_sinks),
                    expected_digest=digest,
                    expected_size=size,
                    what=what,
                    on_bytes=on_bytes,
                )
                handle.flush()
                os.fsync(handle.fileno())
            final = self._final(result.digest)
            if final.exists():
                temporary.unlink()
            else:
                os.replace(temporary, final)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
        return result

    def write_document(self, content: bytes) -> str:
        digest = sha256_bytes(content)
        final = self._final(digest)
        if not (final.exists() and final.stat().st_size == len(content)):
            write_atomically(final, content)
        return digest

    def commit(self, files: Sequence[tuple[str, bytes]]) -> list[str]:
        fsync_path(self.blobs)
        for name, content in files:
            (self.root / name).parent.mkdir(parents=True, exist_ok=True)
            write_atomically(self.root / name, content)
        # Done: the resume cache and anything a killed run left in the work folder go too.
        shutil.rmtree(self.root / layout.WORK_DIR, ignore_errors=True)
        self._cleanup()
        return [str(self.root)]

    def abort(self) -> None:
        self._cleanup()

    def _cleanup(self) -> None:
        shutil.rmtree(self.work, ignore_errors=True)
        with contextlib.suppress(OSError):
            (self.root / layout.WORK_DIR).rmdir()
        with contextlib.suppress(OSError):
            (self.root / f"{layout.WORK_DIR}.lock").unlink()
        with contextlib.suppress(OSError):
            os.close(self._lock)
