"""Find the OS and Python packages installed in container image layers.

Layers are read as a stream, exactly once, and never unpacked to disk: only the
few small files that describe installed packages (the dpkg and apk databases and
Python ``*.dist-info/METADATA`` files) are read into memory, everything else is
skipped as it streams past.  Whiteout entries are recorded so that
:func:`merge_image_packages` can apply the overlay rules across layers.

:class:`BackgroundLayerScanner` lets a copy loop that is already reading (and
hashing) a blob feed the same bytes to the scanner, so the registry or the disk
is read once per layer.
"""

from __future__ import annotations

import queue
import re
import tarfile
import threading
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from email.parser import HeaderParser
from types import TracebackType
from typing import BinaryIO, Protocol
from urllib.parse import quote

from sealift import media_types

__all__ = [
    "DEFAULT_MAX_FILE_SIZE",
    "SCANNABLE_MEDIA_TYPES",
    "BackgroundLayerScanner",
    "FoundPackage",
    "LayerScan",
    "LayerScanError",
    "UnsupportedLayer",
    "merge_image_packages",
    "normalize_pypi_name",
    "parse_apk_installed",
    "parse_dpkg_status",
    "parse_python_metadata",
    "scan_layer",
]

#: Files of interest larger than this are skipped (with a reason) rather than read.
#: A dpkg status file for a few thousand packages is around 10 MiB.
DEFAULT_MAX_FILE_SIZE = 32 * 1024 * 1024

#: Layer media types this module can read: plain or gzip-compressed tar (one table for the project).
SCANNABLE_MEDIA_TYPES: frozenset[str] = media_types.SCANNABLE_LAYERS

ECOSYSTEMS = frozenset({"deb", "apk", "pypi"})

DPKG_STATUS = "var/lib/dpkg/status"
DPKG_STATUS_D = "var/lib/dpkg/status.d"
# Alpine keeps the database in lib/; newer apk-tools releases moved it under usr/.
APK_DATABASES = ("lib/apk/db/installed", "usr/lib/apk/db/installed")
_SITE_DIRS = frozenset({"site-packages", "dist-packages"})

_WHITEOUT_PREFIX = ".wh."
_OPAQUE_MARKER = ".wh..wh..opq"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
# OSError is deliberately absent: it comes from the caller's stream (disk, network)
# and must reach the caller as such, not be reported as a bad layer.  TypeError is
# what tarfile's gzip header parser raises when the input ends inside the header.
_TAR_READ_ERRORS = (tarfile.TarError, EOFError, zlib.error, TypeError)


class LayerScanError(Exception):
    """A layer could not be scanned; ``reason`` is a one-line, user-facing explanation."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class UnsupportedLayer(LayerScanError):
    """The layer's format (for example zstd compression) is one this scanner cannot read."""

    def __init__(self, reason: str, media_type: str = "") -> None:
        super().__init__(reason)
        self.media_type = media_type


def _purl_part(text: str) -> str:
    # purl percent-encodes name and version; ':' is allowed unencoded (deb epochs).
    return quote(text, safe=":")


def normalize_pypi_name(name: str) -> str:
    """Return the PEP 503 normalised form of a Python distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class FoundPackage:
    """One installed package.

    ``path`` says where in the layer it was found (the database or metadata file).
    It is informational and is not part of the package's identity: the same
    package found in two places compares equal.
    """

    ecosystem: str
    name: str
    version: str
    arch: str = ""
    path: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if self.ecosystem not in ECOSYSTEMS:
            raise ValueError(f"unknown package ecosystem {self.ecosystem!r}")
        if not self.name:
            raise ValueError("package name must not be empty")

    @property
    def purl(self) -> str:
        """The package URL (purl) for this package."""
        if self.ecosystem == "pypi":
            base = f"pkg:pypi/{_purl_part(normalize_pypi_name(self.name))}"
        else:
            namespace = "debian" if self.ecosystem == "deb" else "alpine"
            base = f"pkg:{self.ecosystem}/{namespace}/{_purl_part(self.name)}"
        if self.version:
            base += f"@{_purl_part(self.version)}"
        if self.arch and self.ecosystem != "pypi":
            base += f"?arch={_purl_part(self.arch)}"
        return base

    def sort_key(self) -> tuple[str, str, str, str, str]:
        """A total order for deterministic output: ecosystem, name, version, arch, path."""
        return (self.ecosystem, self.name.lower(), self.version, self.arch, self.path)


@dataclass(frozen=True)
class LayerScan:
    """What one layer contributes.

    ``dpkg`` is None when the layer has no dpkg database (neither
    ``var/lib/dpkg/status`` nor ``var/lib/dpkg/status.d/*``); likewise ``apk``.
    ``whiteouts`` lists paths this layer deletes from lower layers: an entry
    ending in ``/`` is an opaque directory (everything beneath it in lower
    layers is hidden), any other entry hides that path and everything beneath it.
    ``sources`` lists every package database or metadata file that was read
    (even one that listed no packages), so an emptied database still overrides a
    lower layer's.  ``skipped`` lists files of interest that were not read, as
    ``"path: reason"``.
    """

    dpkg: tuple[FoundPackage, ...] | None
    apk: tuple[FoundPackage, ...] | None
    python: tuple[FoundPackage, ...]
    whiteouts: tuple[str, ...]
    sources: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()


class _Reader(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


# --------------------------------------------------------------------------- parsing


def _parse_deb822(text: str) -> Iterator[dict[str, str]]:
    """Yield the paragraphs of a deb822 file as {lower-case field: first-line value}."""
    paragraph: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if paragraph:
                yield paragraph
                paragraph = {}
            continue
        # Continuation lines only matter for multi-line fields (Description,
        # Conffiles) that the scan does not use.
        if line[0] in " \t" or line.startswith("#"):
            continue
        key, sep, value = line.partition(":")
        if sep:
            paragraph[key.strip().lower()] = value.strip()
    if paragraph:
        yield paragraph


def parse_dpkg_status(
    data: bytes, path: str = DPKG_STATUS, *, require_status: bool = True
) -> tuple[FoundPackage, ...]:
    """Parse a dpkg status database and return the packages that are installed.

    ``require_status=False`` is for distroless ``status.d`` entries, which are bare
    control files that may lack a ``Status`` field: their presence means installed.
    """
    found: list[FoundPackage] = []
    for para in _parse_deb822(data.decode("utf-8", errors="replace")):
        name = para.get("package", "")
        if not name:
            continue
        status = para.get("status")
        if status is None:
            if require_status:
                continue
        elif status.split()[-1:] != ["installed"]:
            # "deinstall ok config-files", "install ok half-configured", ... are
            # not installed software.
            continue
        found.append(
            FoundPackage("deb", name, para.get("version", ""), para.get("architecture", ""), path)
        )
    return tuple(sorted(found, key=FoundPackage.sort_key))


def parse_apk_installed(data: bytes, path: str = APK_DATABASES[0]) -> tuple[FoundPackage, ...]:
    """Parse an apk ``installed`` database (``P:``/``V:``/``A:`` records)."""
    found: list[FoundPackage] = []
    record: dict[str, str] = {}

    def flush() -> None:
        if record.get("P"):
            found.append(
                FoundPackage("apk", record["P"], record.get("V", ""), record.get("A", ""), path)
            )
        record.clear()

    for line in data.decode("utf-8", errors="replace").splitlines():
        if not line.strip():
            flush()
            continue
        key, sep, value = line.partition(":")
        # Only the first occurrence counts: P/V/A appear once per record, and the
        # file-list keys (F, R, Z, ...) are never the ones looked up.
        if sep and len(key) == 1 and key not in record:
            record[key] = value.strip()
    flush()
    return tuple(sorted(found, key=FoundPackage.sort_key))


def parse_python_metadata(data: bytes, path: str = "") -> FoundPackage | None:
    """Parse core-metadata headers (``METADATA`` / ``PKG-INFO``); None if Name is missing."""
    headers = HeaderParser().parsestr(data.decode("utf-8", errors="replace"), headersonly=True)
    name = (headers.get("Name") or "").strip()
    if not name:
        return None
    return FoundPackage("pypi", name, (headers.get("Version") or "").strip(), "", path)


# --------------------------------------------------------------------------- layer scan


def _normalise_member_path(name: str) -> str:
    while name.startswith("./"):
        name = name[2:]
    return name.strip("/")


def _classify(path: str, is_regular: bool) -> str | None:
    """Return which parser a layer path needs, or None when it is not of interest."""
    if path == DPKG_STATUS:
        return "dpkg"
    parent, _, base = path.rpartition("/")
    if parent == DPKG_STATUS_D:
        # distroless keeps <pkg> and <pkg>.md5sums side by side; only the former
        # is a control paragraph.
        return None if base.endswith(".md5sums") or base.startswith(".") else "dpkg.d"
    if path in APK_DATABASES:
        return "apk"
    parts = path.split("/")
    if (
        len(parts) >= 3
        and parts[-3] in _SITE_DIRS
        and (
            (parts[-1] == "METADATA" and parts[-2].endswith(".dist-info"))
            or (parts[-1] == "PKG-INFO" and parts[-2].endswith(".egg-info"))
        )
    ):
        return "python"
    # distutils-era installs leave a single-file "<name>.egg-info" holding PKG-INFO.
    if (
        is_regular
        and len(parts) >= 2
        and parts[-2] in _SITE_DIRS
        and parts[-1].endswith(".egg-info")
    ):
        return "python"
    return None


def _whiteout_for(path: str) -> str | None:
    """Translate a whiteout entry into the path it hides (opaque dirs end in '/')."""
    parent, _, base = path.rpartition("/")
    if base == _OPAQUE_MARKER:
        return f"{parent}/"
    if base.startswith(_WHITEOUT_PREFIX) and not base.startswith(_WHITEOUT_PREFIX * 2):
        hidden = base[len(_WHITEOUT_PREFIX) :]
        return f"{parent}/{hidden}" if parent else hidden
    # Other ".wh..wh.*" names are aufs bookkeeping, not deletions.
    return None


class _PrefixedReader:
    """Replays bytes already read for sniffing, then continues with the source."""

    def __init__(self, prefix: bytes, source: _Reader) -> None:
        self._prefix = prefix
        self._source = source

    def read(self, size: int = -1, /) -> bytes:
        if self._prefix:
            if size < 0 or size >= len(self._prefix):
                out, self._prefix = self._prefix, b""
                return out
            out, self._prefix = self._prefix[:size], self._prefix[size:]
            return out
        return self._source.read(size)


def _read_exactly(source: _Reader, size: int) -> bytes:
    parts: list[bytes] = []
    remaining = size
    while remaining > 0:
        chunk = source.read(remaining)
        if not chunk:
            break
        parts.append(chunk)
        remaining -= len(chunk)
    return b"".join(parts)


def _check_media_type(media_type: str) -> None:
    base = media_type.split(";", 1)[0].strip().lower()
    if base in SCANNABLE_MEDIA_TYPES:
        return
    if base.endswith("zstd"):
        raise UnsupportedLayer(f"zstd-compressed layer ({base}) is not scanned", media_type)
    raise UnsupportedLayer(f"layer media type {base or '(none)'!r} is not scanned", media_type)


@dataclass
class _ScanState:
    """Mutable accumulator for one layer; turned into a frozen LayerScan at the end."""

    dpkg_status: tuple[FoundPackage, ...] | None = None
    dpkg_status_d: dict[str, tuple[FoundPackage, ...]] = field(default_factory=dict)
    apk: tuple[FoundPackage, ...] | None = None
    python: dict[str, FoundPackage] = field(default_factory=dict)
    whiteouts: list[str] = field(default_factory=list)
    # path -> (kind, packages parsed from it); also lets a later hard link to the
    # same file be resolved without seeking back in the stream.
    sources: dict[str, tuple[str, tuple[FoundPackage, ...]]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)

    def parse(self, kind: str, path: str, data: bytes) -> None:
        if kind == "dpkg":
            packages = parse_dpkg_status(data, path)
        elif kind == "dpkg.d":
            packages = parse_dpkg_status(data, path, require_status=False)
        elif kind == "apk":
            packages = parse_apk_installed(data, path)
        else:
            package = parse_python_metadata(data, path)
            if package is None:
                self.skipped.append(f"{path}: no Name header")
                self.python.pop(path, None)
                self.sources.pop(path, None)
                return
            packages = (package,)
        self.store(kind, path, packages)

    def link(self, kind: str, path: str, target: str) -> None:
        known = self.sources.get(target)
        if known is None or known[0] != kind:
            self.skipped.append(f"{path}: hard link to {target}, which was not read")
            return
        self.store(kind, path, tuple(replace(p, path=path) for p in known[1]))

    def store(self, kind: str, path: str, packages: tuple[FoundPackage, ...]) -> None:
        if kind == "dpkg":
            self.dpkg_status = packages
        elif kind == "dpkg.d":
            self.dpkg_status_d[path] = packages
        elif kind == "apk":
            self.apk = packages
        else:
            self.python[path] = packages[0]
        self.sources[path] = (kind, packages)

    def result(self) -> LayerScan:
        dpkg: tuple[FoundPackage, ...] | None = None
        if self.dpkg_status is not None or self.dpkg_status_d:
            merged = list(self.dpkg_status or ())
            for packages in self.dpkg_status_d.values():
                merged.extend(packages)
            dpkg = tuple(sorted(merged, key=FoundPackage.sort_key))
        return LayerScan(
            dpkg=dpkg,
            apk=self.apk,
            python=tuple(sorted(self.python.values(), key=FoundPackage.sort_key)),
            whiteouts=tuple(sorted(set(self.whiteouts))),
            sources=tuple(sorted(self.sources)),
            skipped=tuple(self.skipped),
        )


def _scan_tar(archive: tarfile.TarFile, max_file_size: int) -> LayerScan:
    state = _ScanState()
    while True:
        member = archive.next()
        # TarFile remembers every member it has seen; a layer can hold hundreds
        # of thousands, so forget them to keep memory flat.  Stream mode never
        # needs them again because nothing here seeks back.
        archive.members.clear()
        if member is None:
            break
        path = _normalise_member_path(member.name)
        hidden = _whiteout_for(path)
        if hidden is not None:
            state.whiteouts.append(hidden)
            continue
        kind = _classify(path, member.isreg() or member.islnk())
        if kind is None:
            continue
        if member.islnk():
            state.link(kind, path, _normalise_member_path(member.linkname))
            continue
        if not member.isreg():
            if member.issym():
                state.skipped.append(f"{path}: symbolic link, not followed")
            continue
        if member.size > max_file_size:
            state.skipped.append(
                f"{path}: {member.size} bytes is over the {max_file_size}-byte limit"
            )
            continue
        extracted = archive.extractfile(member)
        if extracted is None:  # pragma: no cover - isreg() members always extract
            continue
        with extracted:
            state.parse(kind, path, extracted.read())
    return state.result()


def scan_layer(
    stream: BinaryIO | _Reader, media_type: str, *, max_file_size: int = DEFAULT_MAX_FILE_SIZE
) -> LayerScan:
    """Scan one layer blob, read sequentially from ``stream``, for installed packages.

    Raises :class:`UnsupportedLayer` for media types that are not plain or
    gzip-compressed tar (zstd included, also when the bytes turn out to be zstd
    despite the label), and :class:`LayerScanError` when the layer is corrupt.
    The stream is read forward only; it may stop before the end of a valid layer
    (after the tar end-of-archive marker).  This is not an integrity check: a
    layer truncated at a tar block boundary scans as far as it goes, so verify
    the blob's digest separately.  Errors raised by ``stream`` itself propagate.
    """
    _check_media_type(media_type)
    head = _read_exactly(stream, len(_ZSTD_MAGIC))
    if head == _ZSTD_MAGIC:
        raise UnsupportedLayer(f"layer labelled {media_type} is zstd-compressed", media_type)
    source = _PrefixedReader(head, stream)
    try:
        # "r|*" sniffs the compression, so gzip layers labelled as plain tar (or the
        # reverse, which some registries serve) still scan.
        with tarfile.open(fileobj=source, mode="r|*") as archive:  # type: ignore[call-overload]
            return _scan_tar(archive, max_file_size)
    except _TAR_READ_ERRORS as err:
        raise LayerScanError(f"layer is not a readable tar archive: {err}") from err


# --------------------------------------------------------------------------- background


class _Aborted(Exception):
    """Raised inside the worker when the producer gives up on the layer."""


class _QueueReader:
    """A forward-only file object over the chunks handed over by the producer."""

    def __init__(self, chunks: queue.Queue[bytes | None], aborted: threading.Event) -> None:
        self._chunks = chunks
        self._aborted = aborted
        self._buffer = b""
        self._offset = 0
        self._at_end = False

    def read(self, size: int = -1, /) -> bytes:
        if size == 0:
            return b""
        if size < 0:
            parts = [self._buffer[self._offset :]]
            self._buffer, self._offset = b"", 0
            while self._next_chunk():
                parts.append(self._buffer)
                self._buffer = b""
            return b"".join(parts)
        while self._offset >= len(self._buffer):
            if not self._next_chunk():
                return b""
        if self._offset == 0 and size >= len(self._buffer):
            # Hand the producer's bytes object straight through: no copy.
            out, self._buffer = self._buffer, b""
            return out
        out = self._buffer[self._offset : self._offset + size]
        self._offset += len(out)
        return out

    def _next_chunk(self) -> bool:
        if self._at_end:
            return False
        item = self._chunks.get()
        if item is None:
            self._at_end = True
            return False
        if self._aborted.is_set():
            raise _Aborted
        self._buffer, self._offset = item, 0
        return True

    def drain(self) -> None:
        """Discard input until the producer signals the end, so it never blocks."""
        self._buffer, self._offset = b"", 0
        while not self._at_end:
            if self._chunks.get() is None:
                self._at_end = True


class BackgroundLayerScanner:
    """Scan a layer on a worker thread while another loop copies it.

    The producer calls :meth:`write` with each chunk it has read, then
    :meth:`finish` once the copy is complete (or :meth:`abort` if the copy
    failed).  Memory stays bounded: at most ``max_pending`` chunks wait in the
    queue, and :meth:`write` blocks while it is full.

    Scanner failures never disturb the copy: :meth:`write` does not raise because
    of them (once the scanner has failed or finished it simply discards input),
    and :meth:`finish` raises a :class:`LayerScanError` (:class:`UnsupportedLayer`
    for zstd and other unreadable formats), which the caller records as
    "not scanned: <reason>" after the copy has succeeded.
    """

    def __init__(
        self,
        media_type: str,
        *,
        max_pending: int = 2,
        max_file_size: int = DEFAULT_MAX_FILE_SIZE,
    ) -> None:
        if max_pending < 1:
            raise ValueError("max_pending must be at least 1")
        self._media_type = media_type
        self._max_file_size = max_file_size
        self._chunks: queue.Queue[bytes | None] = queue.Queue(maxsize=max_pending)
        self._aborted = threading.Event()
        # Set by the worker once it no longer needs input, so write() can drop
        # chunks without the hand-off.
        self._done = threading.Event()
        self._closed = False
        self._result: LayerScan | None = None
        self._error: LayerScanError | None = None
        self._thread: threading.Thread | None = None
        try:
            _check_media_type(media_type)
        except UnsupportedLayer as err:
            # Known not to scan: no thread at all, input is discarded.
            self._error = err
            self._done.set()
            return
        self._reader = _QueueReader(self._chunks, self._aborted)
        self._thread = threading.Thread(
            target=self._run, name=f"layer-scan-{id(self):x}", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        try:
            self._result = scan_layer(
                self._reader, self._media_type, max_file_size=self._max_file_size
            )
        except LayerScanError as err:
            self._error = err
        except _Aborted:
            self._error = LayerScanError("scan aborted: the layer copy did not complete")
        except Exception as err:
            # A parser bug must surface as "not scanned", not stall or kill the copy.
            failure = LayerScanError(f"scanner failed: {type(err).__name__}: {err}")
            failure.__cause__ = err
            self._error = failure
        finally:
            self._done.set()
            self._reader.drain()

    def _put(self, item: bytes | None) -> None:
        thread = self._thread
        if thread is None:
            return
        while True:
            try:
                self._chunks.put(item, timeout=0.5)
                return
            except queue.Full:
                # The worker drains until the end marker, so the queue only stays
                # full while it is busy; this guards against it having died.
                if not thread.is_alive():
                    return

    def write(self, chunk: bytes | bytearray | memoryview) -> None:
        """Hand the next chunk of the layer to the scanner (blocks while the queue is full)."""
        if self._closed:
            raise RuntimeError("write() after finish() or abort()")
        if not chunk or self._done.is_set():
            return
        # bytes are immutable and can be shared with the worker as they are;
        # bytearray/memoryview buffers may be reused by the caller, so copy them.
        self._put(chunk if type(chunk) is bytes else bytes(chunk))

    def finish(self) -> LayerScan:
        """Signal the end of the layer and return its scan.

        Raises :class:`LayerScanError` if the layer could not be scanned.  Safe to
        call more than once.
        """
        self._close()
        if self._aborted.is_set():
            raise LayerScanError("scan aborted: the layer copy did not complete")
        if self._error is not None:
            raise self._error
        if self._result is None:  # pragma: no cover - the worker always sets one
            raise LayerScanError("scanner produced no result")
        return self._result

    def abort(self) -> None:
        """Stop scanning (the copy failed); waits for the worker to exit."""
        if self._closed:
            return
        self._aborted.set()
        self._close()

    def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._put(None)
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> BackgroundLayerScanner:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        # finish() is the caller's job on success; make sure no thread outlives
        # the block either way.
        if exc_type is not None:
            self.abort()
        else:
            self._close()


# --------------------------------------------------------------------------- merge


def _is_hidden(path: str, whiteouts: Iterable[str]) -> bool:
    for entry in whiteouts:
        if entry.endswith("/"):
            if entry == "/" or path.startswith(entry):
                return True
        elif path == entry or path.startswith(entry + "/"):
            return True
    return False


def _group_by_path(packages: Iterable[FoundPackage], default: str) -> dict[str, list[FoundPackage]]:
    groups: dict[str, list[FoundPackage]] = {}
    for package in packages:
        groups.setdefault(package.path or default, []).append(package)
    return groups


def merge_image_packages(layers: Sequence[LayerScan]) -> tuple[FoundPackage, ...]:
    """Combine per-layer scans (lowest layer first) into the image's package list.

    Overlay rules: a file in a higher layer replaces the same path below, and a
    whiteout hides lower layers' paths.  The dpkg status file and the apk
    database are whole files, so the topmost one wins; distroless
    ``status.d`` entries and Python metadata files are per package, so they
    accumulate.  The result is de-duplicated and sorted.
    """
    dpkg_status: tuple[str, list[FoundPackage]] | None = None
    apk_db: tuple[str, list[FoundPackage]] | None = None
    per_file: dict[str, list[FoundPackage]] = {}

    for layer in layers:
        if layer.whiteouts:
            if dpkg_status is not None and _is_hidden(dpkg_status[0], layer.whiteouts):
                dpkg_status = None
            if apk_db is not None and _is_hidden(apk_db[0], layer.whiteouts):
                apk_db = None
            per_file = {
                path: pkgs
                for path, pkgs in per_file.items()
                if not _is_hidden(path, layer.whiteouts)
            }

        if layer.dpkg is not None:
            groups = _group_by_path(layer.dpkg, DPKG_STATUS)
            if DPKG_STATUS in layer.sources or DPKG_STATUS in groups:
                dpkg_status = (DPKG_STATUS, groups.pop(DPKG_STATUS, []))
            for source in layer.sources:
                if source.startswith(DPKG_STATUS_D + "/"):
                    per_file[source] = []
            per_file.update(groups)

        if layer.apk is not None:
            apk_path = next((s for s in layer.sources if s in APK_DATABASES), "")
            if not apk_path:
                apk_path = next((p.path for p in layer.apk if p.path), APK_DATABASES[0])
            apk_db = (apk_path, list(layer.apk))

        for package in layer.python:
            # Packages without a recorded path cannot be whited out individually;
            # give them a key that no whiteout matches.
            per_file[package.path or f"\0{package.name}\0{package.version}"] = [package]

    everything: list[FoundPackage] = []
    for slot in (dpkg_status, apk_db):
        if slot is not None:
            everything.extend(slot[1])
    for pkgs in per_file.values():
        everything.extend(pkgs)

    unique: dict[FoundPackage, FoundPackage] = {}
    for package in sorted(everything, key=FoundPackage.sort_key):
        # First in sort order wins, so the reported path is deterministic too.
        unique.setdefault(package, package)
    return tuple(unique.values())
