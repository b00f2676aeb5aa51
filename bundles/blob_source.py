"""Reading a bundle in place: a directory, a tar, or the parts of a split tar.

One interface over the three forms, so verify, inspect, install and the tests read bundles the
same way. Tars are never extracted: their headers are scanned once into an offset index and each
file is then read with ``os.pread`` at its offset, across part boundaries, from any number of
threads at once. Entry names are checked as they are indexed: absolute paths, ``..``, links out
of the bundle and device files are refused before anything is read.
"""

from __future__ import annotations

import io
import json
import os
import re
import stat
import tarfile
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

from sealift.bundles import layout
from sealift.errors import InputError, IntegrityError

MAX_SMALL_FILE = 64 * 1024 * 1024
_PART_NUMBER = re.compile(rf"^(.*)\.(\d{{{layout.PART_SUFFIX_DIGITS}}})$")


@dataclass(frozen=True)
class PartInfo:
    """One part of a split tar as the parts index records it."""

    name: str
    size: int
    sha256: str


class BlobSource(ABC):
    """A bundle's files by layout name (``index.json``, ``blobs/sha256/...``)."""

    description: str

    @abstractmethod
    def names(self) -> list[str]:
        """Every file name in the bundle, sorted."""

    @abstractmethod
    def size(self, name: str) -> int:
        """Size of a file; KeyError if absent."""

    @abstractmethod
    def open(self, name: str) -> BinaryIO:
        """A streaming reader over one file."""

    @abstractmethod
    def location(self, name: str) -> str:
        """Where a file lives, for messages: a path, or a part file and offset."""

    def close(self) -> None:  # noqa: B027 - directories need no cleanup
        """Release file handles."""

    def same_storage(self, first: str, second: str) -> bool:
        """Whether two names are one stored copy (a tar hard link and its target)."""
        return first == second

    def has(self, name: str) -> bool:
        """Whether the bundle holds ``name``."""
        try:
            self.size(name)
        except KeyError:
            return False
        return True

    def read_small(self, name: str, *, limit: int = MAX_SMALL_FILE) -> bytes:
        """Read a small file (a manifest, an index) whole; refuses anything larger than limit."""
        size = self.size(name)
        if size > limit:
            raise IntegrityError(
                f"{self.description}: {name} is {size} bytes, more than a {limit}-byte document",
                hint="the bundle is damaged or not a sealift bundle",
            )
        with self.open(name) as reader:
            return reader.read()

    # -- detached signatures: added later without touching anything that is hashed ---------

    @property
    def signature_folder(self) -> Path:
        """Where new signatures are added: ``signatures/`` of a folder, or a tar's sidecar."""
        raise NotImplementedError

    def signature_names(self) -> list[str]:
        """Every signature in the bundle or beside it, as ``signatures/...`` names."""
        names = {n for n in self.names() if layout.is_signature_name(n)}
        folder = self.signature_folder
        if folder.is_dir():
            for path in folder.rglob("*.sig"):
                name = f"{layout.SIGNATURES_DIR}/{path.relative_to(folder).as_posix()}"
                if layout.is_signature_name(name) and path.is_file() and not path.is_symlink():
                    names.add(name)
        return sorted(names)

    def read_signature(self, name: str) -> bytes:
        """The bytes of one signature file."""
        if self.has(name):
            return self.read_small(name, limit=16 * 1024 * 1024)
        path = self.signature_folder / name.removeprefix(layout.SIGNATURES_DIR + "/")
        return path.read_bytes()

    def add_signature(self, name: str, content: bytes) -> str:
        """Store a new signature; an existing one (the vendor's) is never overwritten."""
        if not layout.is_signature_name(name):
            raise ValueError(name)
        if name in self.signature_names():
            raise InputError(
                f"{self.description} already has the signature {name}",
                hint="signatures are never replaced: choose another --signer-name",
            )
        folder = self.signature_folder
        relative = Path(name.removeprefix(layout.SIGNATURES_DIR + "/"))
        path = folder / relative
        if folder.is_symlink():
            raise IntegrityError(
                f"{folder} is a symbolic link",
                hint="signatures are written only into a real folder",
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        # A link anywhere below the folder would send the signature somewhere else.
        if Path(os.path.realpath(path.parent)) != Path(os.path.realpath(folder)) / relative.parent:
            raise IntegrityError(
                f"{path.parent} leads out of {folder} through a symbolic link",
                hint="remove the link; signatures are written only inside the bundle",
            )
        temporary = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
        fd = os.open(temporary, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(temporary, path)  # fails if the name exists: never overwrite a signature
        except FileExistsError as taken:
            raise InputError(
                f"{self.description} already has the signature {name}",
                hint="signatures are never replaced: choose another --signer-name",
            ) from taken
        finally:
            temporary.unlink(missing_ok=True)
        return str(path)

    def blobs(self) -> dict[str, int]:
        """Every blob in the bundle: digest to size."""
        found: dict[str, int] = {}
        for name in self.names():
            digest = layout.digest_of_blob_name(name)
            if digest:
                found[digest] = self.size(name)
        return found

    def __enter__(self) -> BlobSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class DirectorySource(BlobSource):
    """A bundle written as a directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.description = f"bundle directory {root}"
        self._sizes: dict[str, int] = {}
        for folder, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d != layout.WORK_DIR)
            for filename in filenames:
                path = Path(folder) / filename
                name = path.relative_to(root).as_posix()
                info = path.lstat()
                if not stat.S_ISREG(info.st_mode):
                    raise IntegrityError(
                        f"{self.description}: {name} is not a regular file",
                        hint="a bundle holds only regular files; remove links and devices",
                    )
                self._sizes[name] = info.st_size

    def names(self) -> list[str]:
        return sorted(self._sizes)

    def size(self, name: str) -> int:
        return self._sizes[name]

    def open(self, name: str) -> BinaryIO:
        if name not in self._sizes:
            raise KeyError(name)
        return (self.root / name).open("rb")

    def location(self, name: str) -> str:
        return str(self.root / name)

    @property
    def signature_folder(self) -> Path:
        return self.root / layout.SIGNATURES_DIR


class _Parts:
    """The bytes of one or more files seen as one address space, read with pread."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths = paths
        self._fds: list[int] = []
        self.starts: list[int] = []
        total = 0
        try:
            for path in paths:
                fd = os.open(path, os.O_RDONLY)
                self._fds.append(fd)
                self.starts.append(total)
                total += os.fstat(fd).st_size
        except OSError:
            self.close()
            raise
        self.total = total

    def part_of(self, offset: int) -> int:
        """Index of the part that holds byte ``offset``."""
        low, high = 0, len(self.starts) - 1
        while low < high:
            middle = (low + high + 1) // 2
            if self.starts[middle] <= offset:
                low = middle
            else:
                high = middle - 1
        return low

    def pread_into(self, buffer: memoryview, offset: int) -> int:
        """Fill as much of ``buffer`` as one part allows from ``offset``; 0 at the end."""
        if offset >= self.total:
            return 0
        index = self.part_of(offset)
        local = offset - self.starts[index]
        part_end = self.starts[index + 1] if index + 1 < len(self.starts) else self.total
        count = min(len(buffer), part_end - offset)
        return os.preadv(self._fds[index], [buffer[:count]], local)

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds = []


class _RangeReader(io.RawIOBase):
    """A reader over ``[start, start + length)`` of a :class:`_Parts`; its own position."""

    def __init__(self, parts: _Parts, start: int, length: int) -> None:
        super().__init__()
        self._parts = parts
        self._start = start
        self._length = length
        self._position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._length}[whence]
        self._position = max(0, base + offset)
        return self._position

    def readinto(self, buffer: Any) -> int:  # type: ignore[override]
        remaining = self._length - self._position
        if remaining <= 0:
            return 0
        view = memoryview(buffer).cast("B")
        count = self._parts.pread_into(
            view[: min(len(view), remaining)], self._start + self._position
        )
        self._position += count
        return count


@dataclass(frozen=True)
class _TarEntry:
    offset: int
    size: int


class TarSource(BlobSource):
    """A bundle written as one tar, or as the parts of a split tar, read in place."""

    def __init__(
        self,
        paths: list[Path],
        *,
        description: str,
        parts: tuple[PartInfo, ...] = (),
        sidecar: Path | None = None,
    ):
        self.description = description
        self.part_paths = paths
        self.parts = parts
        # Signatures added after the tar was written live beside it: NAME.tar.signatures/.
        self.sidecar = sidecar or paths[0].with_name(
            paths[0].name + layout.SIGNATURES_SIDECAR_SUFFIX
        )
        self._parts = _Parts(paths)
        try:
            self._entries = self._index()
        except BaseException:
            self._parts.close()
            raise

    def _bad(self, member: str, problem: str) -> IntegrityError:
        return IntegrityError(
            f"{self.description}: tar entry {member!r} {problem}",
            hint="refusing to read this tar; it was not written by sealift or was tampered with",
        )

    def _index(self) -> dict[str, _TarEntry]:
        entries: dict[str, _TarEntry] = {}
        links: list[tuple[str, str]] = []
        scanner = _RangeReader(self._parts, 0, self._parts.total)
        try:
            archive = tarfile.open(fileobj=scanner, mode="r:")  # type: ignore[call-overload]  # noqa: SIM115 - closed by the with below
        except tarfile.TarError as bad:
            raise IntegrityError(
                f"{self.description} is not a readable tar ({bad})",
                hint="check that every part was copied completely",
            ) from bad
        with archive:
            try:
                for member in archive:
                    name = _clean_name(member.name)
                    if name is None:
                        raise self._bad(member.name, "escapes the bundle (absolute or '..')")
                    if member.isdir():
                        continue
                    if member.islnk():
                        target = _clean_name(member.linkname)
                        if target is None:
                            raise self._bad(
                                member.name, f"links out of the bundle ({member.linkname})"
                            )
                        links.append((name, target))
                        continue
                    if not member.isreg() or member.issparse():
                        raise self._bad(member.name, "is not a regular file")
                    if name in entries:
                        raise self._bad(member.name, "appears twice")
                    entries[name] = _TarEntry(offset=member.offset_data, size=member.size)
            except tarfile.TarError as bad:
                raise IntegrityError(
                    f"{self.description}: the tar is truncated or damaged ({bad})",
                    hint="copy the bundle (or the part named by verify) again",
                ) from bad
        for name, target in links:
            if target not in entries or name in entries:
                raise self._bad(name, f"is a hard link to a missing or clashing entry {target!r}")
            entries[name] = entries[target]
        for name, entry in entries.items():
            if entry.offset + entry.size > self._parts.total:
                raise IntegrityError(
                    f"{self.description}: {name} runs past the end of the tar",
                    hint="a part is missing or truncated; copy it again",
                )
        return entries

    def names(self) -> list[str]:
        return sorted(self._entries)

    def size(self, name: str) -> int:
        return self._entries[name].size

    def open(self, name: str) -> BinaryIO:
        entry = self._entries[name]
        return io.BufferedReader(_RangeReader(self._parts, entry.offset, entry.size), 1 << 20)

    def same_storage(self, first: str, second: str) -> bool:
        return self._entries[first] == self._entries[second]

    @property
    def signature_folder(self) -> Path:
        return self.sidecar

    def location(self, name: str) -> str:
        entry = self._entries[name]
        first = self._parts.part_of(entry.offset)
        last = self._parts.part_of(max(entry.offset + entry.size - 1, entry.offset))
        files = [p.name for p in self.part_paths[first : last + 1]]
        offset = entry.offset - self._parts.starts[first]
        return f"{' + '.join(files)} at offset {offset}"

    def close(self) -> None:
        self._parts.close()


def _clean_name(name: str) -> str | None:
    """A tar member name as a relative layout path, or None if it escapes the bundle."""
    if name.startswith("/") or "\\" in name:
        return None
    parts = [p for p in PurePosixPath(name).parts if p != "."]
    if not parts or any(p == ".." for p in parts):
        return None
    return "/".join(parts)


def read_parts_index(path: Path) -> tuple[PartInfo, ...]:
    """Load a parts index; its parts must all be present with their recorded sizes."""
    try:
        document = json.loads(path.read_text())
        parts = tuple(
            PartInfo(name=str(p["name"]), size=int(p["size"]), sha256=str(p["sha256"]))
            for p in document["parts"]
        )
    except (OSError, ValueError, KeyError, TypeError) as bad:
        raise InputError(
            f"parts index {path} is unreadable ({type(bad).__name__})",
            hint="copy the .parts.json file again from the transfer media",
        ) from bad
    for part in parts:
        if "/" in part.name or part.name in ("", ".", ".."):
            raise IntegrityError(
                f"parts index {path} names a part outside its folder: {part.name!r}",
                hint="the parts index is damaged or malicious; copy it again from the vendor",
            )
        candidate = path.parent / part.name
        if not candidate.is_file():
            raise InputError(
                f"part {candidate} is missing",
                hint="copy every part listed in the .parts.json into the same folder",
            )
        actual = candidate.stat().st_size
        if actual != part.size:
            raise IntegrityError(
                f"part {candidate} has {actual} bytes, the parts index says {part.size}",
                hint="the copy of this part is incomplete; copy it again",
            )
    return parts


def open_bundle(path: Path) -> BlobSource:
    """Open a bundle given as a directory, a tar, a split tar's base name, first part or index."""
    if path.is_dir():
        return DirectorySource(path)
    text = str(path)
    index_path: Path | None = None
    if text.endswith(layout.PARTS_INDEX_SUFFIX):
        index_path = path
    elif Path(layout.parts_index_name(text)).is_file() and not path.is_file():
        index_path = Path(layout.parts_index_name(text))
    else:
        match = _PART_NUMBER.match(text)
        if match and Path(layout.parts_index_name(match.group(1))).is_file():
            index_path = Path(layout.parts_index_name(match.group(1)))
    if index_path is not None:
        parts = read_parts_index(index_path)
        paths = [index_path.parent / part.name for part in parts]
        name = index_path.name.removesuffix(layout.PARTS_INDEX_SUFFIX)
        description = f"split tar bundle {name} ({len(parts)} parts)"
        sidecar = index_path.with_name(name + layout.SIGNATURES_SIDECAR_SUFFIX)
        return TarSource(paths, description=description, parts=parts, sidecar=sidecar)
    base = _PART_NUMBER.match(text)
    base_path = Path(base.group(1)) if base else path
    if base_path.with_name(base_path.name + layout.JOURNAL_SUFFIX).exists() or any(
        base_path.parent.glob(base_path.name + "*" + layout.PARTIAL_SUFFIX)
    ):
        raise InputError(
            f"bundle {path} is incomplete: the create of {base_path.name} was interrupted",
            hint="run bundle create again to finish it; it resumes where it stopped",
        )
    if path.is_file():
        return TarSource([path], description=f"tar bundle {path}")
    raise InputError(
        f"bundle {path} does not exist",
        hint="give the bundle directory, the .tar, or the first part of a split tar",
    )
