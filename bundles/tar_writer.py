"""Writes a bundle as one uncompressed tar stream, cut into parts while it is written.

No second copy on disk: each blob streams from its source straight into the tar, hashed once
for its digest and once for the part it lands in. Blobs whose digest is known up front are
stored at ``blobs/sha256/<hex>``. A model file's digest is only known after it has streamed, and
a tar header comes before its data, so model files are stored under a readable path
(``models/NAME/VERSION/FILE``) and their ``blobs/sha256/<hex>`` names are hard links appended at
the end: extracted, the tar is a plain OCI layout; read in place, the offset index resolves the
links. Parts are written as ``.partial`` and renamed when full; the parts index comes last.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tarfile
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO

from sealift.bundles import layout
from sealift.durable_files import fsync_path, write_atomically
from sealift.errors import InputError, ResourceError
from sealift.hashing import CopyResult, Sink, copy_stream, sha256_bytes

BLOCK = tarfile.BLOCKSIZE
MAX_PENDING_HASHES = 4


class _BackgroundHash:
    """A sha256 fed from another thread, so a part's hash runs beside the blob's own hash.

    Updates run in order on one worker thread (hashlib releases the GIL); at most a few chunks
    wait, so memory stays bounded.
    """

    def __init__(self) -> None:
        self._hasher = hashlib.sha256()
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="part-hash")
        self._pending: deque[Future[None]] = deque()

    def update(self, data: bytes | memoryview) -> None:
        # The copy loop reuses its buffer: hand the worker its own copy of these bytes.
        chunk = bytes(data)
        self._pending.append(self._worker.submit(self._hasher.update, chunk))
        while len(self._pending) > MAX_PENDING_HASHES:
            self._pending.popleft().result()

    def hexdigest(self) -> str:
        while self._pending:
            self._pending.popleft().result()
        return self._hasher.hexdigest()

    def close(self) -> None:
        self._worker.shutdown(wait=True)


HEADER_ALLOWANCE = 3 * BLOCK  # a PAX header and the ustar header, rounded up
SPACE_MARGIN = 16 * 1024 * 1024


def _header(name: str, size: int, *, link_to: str | None = None) -> bytes:
    info = tarfile.TarInfo(name)
    info.mtime = 0
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if link_to is not None:
        info.type = tarfile.LNKTYPE
        info.linkname = link_to
        info.size = 0
    else:
        info.size = size
    return info.tobuf(format=tarfile.PAX_FORMAT, encoding="utf-8", errors="strict")


class _PartStream:
    """A byte sink that fills parts of at most ``part_size`` bytes, hashing each part."""

    def __init__(self, base: Path, part_size: int | None) -> None:
        self.base = base
        self.part_size = part_size
        self.parts: list[dict[str, object]] = []
        self.written = 0
        # Bytes below this logical offset are already durable from an interrupted run.
        self.durable = 0
        self._handle: BinaryIO | None = None
        self._hasher = _BackgroundHash()
        self._in_part = 0
        self._path: Path | None = None

    def resume(self, offset: int, parts: list[dict[str, object]]) -> None:
        """Continue an interrupted stream whose first ``offset`` bytes are durable on disk."""
        self.durable = offset
        self.parts = list(parts)
        if self.part_size is None:
            # One tar: cut the partial file back to the last durable point and append.
            partial = self.base.with_name(self.base.name + layout.PARTIAL_SUFFIX)
            with partial.open("r+b") as handle:
                handle.truncate(offset)
            self._path = self.base
            self._handle = partial.open("ab")
            self._in_part = offset

    def checkpoint(self) -> tuple[int, list[dict[str, object]]]:
        """A point up to which everything is durable: the last full part, or (one tar) now."""
        if self.part_size is None:
            if self._handle is not None:
                self._handle.flush()
                os.fsync(self._handle.fileno())
            return max(self.written, self.durable), []
        done = sum(int(p["size"]) for p in self.parts)  # type: ignore[call-overload]
        return max(done, self.durable), list(self.parts)

    def _final_path(self) -> Path:
        if self.part_size is None:
            return self.base
        return self.base.with_name(layout.part_name(self.base.name, len(self.parts)))

    def _open(self) -> None:
        self._path = self._final_path()
        partial = self._path.with_name(self._path.name + layout.PARTIAL_SUFFIX)
        self._handle = partial.open("wb")
        self._hasher.close()
        self._hasher = _BackgroundHash()
        self._in_part = 0

    def _close_part(self) -> None:
        assert self._handle is not None and self._path is not None
        self._handle.flush()
        os.fsync(self._handle.fileno())
        self._handle.close()
        partial = self._path.with_name(self._path.name + layout.PARTIAL_SUFFIX)
        os.replace(partial, self._path)
        self.parts.append(
            {"name": self._path.name, "size": self._in_part, "sha256": self._hasher.hexdigest()}
        )
        self._handle = None

    def skip(self, count: int) -> None:
        """Move past ``count`` bytes that an interrupted run already made durable."""
        self.written += count

    def write(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        if self.written < self.durable:
            # Re-streamed bytes of an entry that straddles the resume point: already on disk.
            already = min(len(view), self.durable - self.written)
            self.written += already
            view = view[already:]
        while len(view):
            if self._handle is None:
                self._open()
            assert self._handle is not None
            room = len(view) if self.part_size is None else self.part_size - self._in_part
            piece = view[:room]
            self._handle.write(piece)
            self._hasher.update(piece)
            self._in_part += len(piece)
            self.written += len(piece)
            view = view[len(piece) :]
            if self.part_size is not None and self._in_part >= self.part_size:
                self._close_part()

    def finish(self) -> None:
        if self._handle is not None:
            self._close_part()
        self._hasher.close()

    def partial_paths(self) -> list[Path]:
        """Every file this stream created, finished or not."""
        paths = [self.base.with_name(str(p["name"])) for p in self.parts]
        if self._path is not None:
            paths.append(self._path.with_name(self._path.name + layout.PARTIAL_SUFFIX))
        return paths

    def abort(self, *, keep: bool) -> None:
        """Stop writing; with ``keep`` durable parts stay for a re-run, else all is removed."""
        self._hasher.close()
        if self._handle is not None:
            self._handle.flush()
            os.fsync(self._handle.fileno())
            self._handle.close()
            self._handle = None
        if keep:
            return
        for path in self.partial_paths():
            path.unlink(missing_ok=True)


class TarWriter:
    """A :class:`BundleWriter` producing ``NAME.tar`` or ``NAME.tar.000 …`` + ``.parts.json``."""

    concurrent = False

    def __init__(self, output: Path, *, part_size: int | None = None) -> None:
        self.output = output
        self.part_size = part_size
        if part_size is not None and part_size < 1024 * 1024:
            raise InputError(
                f"--split {part_size} is too small", hint="parts must be at least 1MiB"
            )
        existing = [output, Path(layout.parts_index_name(str(output)))]
        if part_size is None:
            existing += [output.with_name(layout.part_name(output.name, 0))]
        for path in existing:
            if path.exists():
                raise InputError(
                    f"output {path} already exists", hint="remove it or choose another -o"
                )
        if not output.parent.is_dir():
            raise InputError(
                f"output folder {output.parent} does not exist", hint="create it first"
            )
        self._stream = _PartStream(output, part_size)
        self._written: set[str] = set()
        self._links: dict[str, str] = {}
        self._keep_on_abort = False

    @property
    def position(self) -> int:
        """The logical offset in the tar stream that the next entry starts at."""
        return self._stream.written

    @staticmethod
    def span(name: str, size: int) -> int:
        """Bytes an entry occupies in the stream: header, data and padding."""
        return len(_header(name, size)) + size + (-size % BLOCK)

    @staticmethod
    def entry_name(digest: str | None, data_name: str | None) -> str:
        """The tar name of a blob: its digest path when known, else its readable data name."""
        if digest is not None:
            return layout.blob_name(digest)
        if data_name is None:
            raise ValueError("a blob of unknown digest needs a data name")
        return data_name

    def resume(self, offset: int, parts: list[dict[str, object]]) -> None:
        """Continue a stream an interrupted run made durable up to ``offset``."""
        self._stream.resume(offset, parts)

    def skip_entry(self, name: str, size: int, digest: str) -> None:
        """Account for an entry that is already durable from an interrupted run."""
        self._stream.skip(self.span(name, size))
        if name == layout.blob_name(digest):
            self._written.add(digest)
        elif digest not in self._written and digest not in self._links:
            self._links[digest] = name

    def checkpoint(self) -> tuple[int, list[dict[str, object]]]:
        """A resume point: everything before the offset is durable (see ``_PartStream``)."""
        return self._stream.checkpoint()

    def keep_on_abort(self) -> None:
        """Leave durable parts in place on abort, for a re-run to resume from."""
        self._keep_on_abort = True

    def has_blob(self, digest: str, size: int) -> bool:
        return digest in self._written or digest in self._links

    def bytes_needed(self, sizes: Sequence[tuple[str | None, int]]) -> int:
        total = SPACE_MARGIN
        seen: set[str] = set()
        for digest, size in sizes:
            if digest is not None and digest in seen:
                continue
            if digest is not None:
                seen.add(digest)
            total += size + HEADER_ALLOWANCE + BLOCK
        return total

    def check_space(self, needed: int) -> None:
        """Refuse to start when the output filesystem cannot hold the whole tar."""
        free = shutil.disk_usage(self.output.parent).free
        if free < needed:
            raise ResourceError(
                f"output {self.output.parent} has {free} bytes free, the bundle needs {needed}",
                hint="free some space, or write parts to larger media",
            )

    def _pad(self, size: int) -> None:
        remainder = size % BLOCK
        if remainder:
            self._stream.write(bytes(BLOCK - remainder))

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
        name = self.entry_name(digest, data_name)
        self._stream.write(_header(name, size))
        result = copy_stream(
            source,
            (self._stream, *extra_sinks),
            expected_digest=digest,
            expected_size=size,
            what=what,
            on_bytes=on_bytes,
        )
        self._pad(size)
        if digest is not None:
            self._written.add(digest)
        elif result.digest not in self._written and result.digest not in self._links:
            self._links[result.digest] = name
        return result

    def write_document(self, content: bytes) -> str:
        digest = sha256_bytes(content)
        if digest in self._written or digest in self._links:
            return digest
        self._stream.write(_header(layout.blob_name(digest), len(content)))
        self._stream.write(content)
        self._pad(len(content))
        self._written.add(digest)
        return digest

    def commit(self, files: Sequence[tuple[str, bytes]]) -> list[str]:
        for digest, target in sorted(self._links.items()):
            self._stream.write(_header(layout.blob_name(digest), 0, link_to=target))
        for name, content in files:
            self._stream.write(_header(name, len(content)))
            self._stream.write(content)
            self._pad(len(content))
        self._stream.write(bytes(2 * BLOCK))
        self._stream.finish()
        if self.part_size is None:
            fsync_path(self.output.parent)
            return [str(self.output)]
        index = {
            "apiVersion": "sealift.dev/v1alpha1",
            "kind": "BundleParts",
            "tar": self.output.name,
            "partSize": self.part_size,
            "totalSize": self._stream.written,
            "parts": self._stream.parts,
        }
        index_path = Path(layout.parts_index_name(str(self.output)))
        write_atomically(index_path, (json.dumps(index, indent=2, sort_keys=True) + "\n").encode())
        return [str(self.output.with_name(str(p["name"]))) for p in self._stream.parts] + [
            str(index_path)
        ]

    def abort(self) -> None:
        # Durable parts stay only when a journal says how to resume from them; either way no
        # parts index and no final tar name exist, so nothing looks like a finished bundle.
        self._stream.abort(keep=self._keep_on_abort)
