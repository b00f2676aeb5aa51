"""The one hashing stream: every byte that moves is hashed while it moves, never re-read to check.

``copy_stream`` is the single copy loop of the project. It reads a source into one reused buffer,
feeds the hash, hands the same bytes to each sink and to the progress reporter, and at the end
checks size and digest against what was promised. hashlib releases the GIL for large updates, so
several copies in threads hash on several cores.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import BinaryIO, Protocol

from sealift.errors import InputError, IntegrityError

CHUNK_SIZE = 4 * 1024 * 1024
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
EMPTY_SHA256 = "sha256:" + hashlib.sha256(b"").hexdigest()


def check_digest(value: str, *, what: str = "digest") -> str:
    """Return ``value`` if it is a well-formed ``sha256:<64 hex>`` digest, else raise InputError.

    Digests become file names in a blob store, so anything else (another algorithm, upper case,
    a path) is refused before it can name a file.
    """
    if not isinstance(value, str) or not _DIGEST.match(value):
        raise InputError(
            f"{what} {value!r} is not a sha256 digest",
            hint="digests look like sha256: followed by 64 lower-case hex characters",
        )
    return value


def digest_hex(digest: str) -> str:
    """The 64 hex characters of a checked ``sha256:`` digest."""
    return check_digest(digest)[len("sha256:") :]


def sha256_bytes(data: bytes) -> str:
    """Digest of a small in-memory document (manifests, configs, indexes)."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


class Sink(Protocol):
    """Anything bytes can be written to."""

    def write(self, data: bytes | memoryview, /) -> object: ...


@dataclass(frozen=True)
class CopyResult:
    """What a copy saw: the digest and size of exactly the bytes that passed."""

    digest: str
    size: int


def copy_stream(
    source: BinaryIO,
    sinks: Sequence[Sink] = (),
    *,
    expected_digest: str | None = None,
    expected_size: int | None = None,
    what: str = "blob",
    on_bytes: Callable[[int], None] | None = None,
    limit: int | None = None,
) -> CopyResult:
    """Copy ``source`` to every sink, hashing on the way; verify digest and size at the end.

    ``limit`` stops after that many bytes (a member inside a larger file). A source longer than
    ``expected_size`` is caught as soon as it overruns, not after streaming the rest. Raises
    :class:`IntegrityError` naming ``what`` on any mismatch; sinks have then seen the bytes, so
    callers write to temporary names and publish only after this returns.
    """
    hasher = hashlib.sha256()
    buffer = bytearray(CHUNK_SIZE)
    view = memoryview(buffer)
    total = 0
    remaining = limit if limit is not None else expected_size
    readinto = getattr(source, "readinto", None)
    while remaining is None or remaining > 0:
        want = CHUNK_SIZE if remaining is None else min(CHUNK_SIZE, remaining)
        if readinto is not None:
            count = readinto(view[:want])
            chunk = view[:count] if count else b""
        else:
            data = source.read(want)
            count = len(data)
            chunk = data
        if not count:
            break
        hasher.update(chunk)
        for sink in sinks:
            sink.write(chunk)
        total += count
        if remaining is not None:
            remaining -= count
        if on_bytes is not None:
            on_bytes(count)
    if limit is None and expected_size is not None and remaining == 0 and source.read(1):
        raise IntegrityError(
            f"{what} is longer than its declared size of {expected_size} bytes",
            hint="the source changed or is corrupt; fetch it again",
        )
    digest = "sha256:" + hasher.hexdigest()
    if expected_size is not None and total != expected_size:
        raise IntegrityError(
            f"{what} has {total} bytes, expected {expected_size}",
            hint="the source is truncated or changed; fetch or copy it again",
        )
    if expected_digest is not None and digest != expected_digest:
        raise IntegrityError(
            f"{what} has digest {digest}, expected {expected_digest}",
            hint="the content was modified or corrupted; fetch or copy it again",
        )
    return CopyResult(digest=digest, size=total)


def hash_stream(
    source: BinaryIO,
    *,
    expected_digest: str | None = None,
    expected_size: int | None = None,
    what: str = "blob",
    on_bytes: Callable[[int], None] | None = None,
) -> CopyResult:
    """Hash a stream with no sink: verification of content already at rest."""
    return copy_stream(
        source,
        (),
        expected_digest=expected_digest,
        expected_size=expected_size,
        what=what,
        on_bytes=on_bytes,
    )


class VerifyingReader:
    """A reader that hashes what is read from it and fails at the end on a mismatch.

    For consumers that pull bytes themselves (an S3 multipart upload): the error is raised
    when the last byte is read, before the consumer can finish and publish what it read.
    """

    def __init__(
        self,
        source: BinaryIO,
        *,
        expected_digest: str,
        expected_size: int,
        what: str,
        on_bytes: Callable[[int], None] | None = None,
    ) -> None:
        self._source = source
        self._expected_digest = expected_digest
        self._expected_size = expected_size
        self._what = what
        self._on_bytes = on_bytes
        self._hasher = hashlib.sha256()
        self._read = 0

    def read(self, count: int = -1) -> bytes:
        """Read, hash, and check size and digest once the declared size is reached."""
        remaining = self._expected_size - self._read
        if remaining <= 0:
            if self._source.read(1):
                raise IntegrityError(
                    f"{self._what} is longer than its declared {self._expected_size} bytes",
                    hint="the source is damaged; run bundle verify",
                )
            return b""
        want = remaining if count is None or count < 0 else min(count, remaining)
        data = self._source.read(want)
        if not data:
            raise IntegrityError(
                f"{self._what} has {self._read} bytes, expected {self._expected_size}",
                hint="the source is truncated; run bundle verify",
            )
        self._hasher.update(data)
        self._read += len(data)
        if self._on_bytes is not None:
            self._on_bytes(len(data))
        if self._read == self._expected_size:
            digest = "sha256:" + self._hasher.hexdigest()
            if digest != self._expected_digest:
                raise IntegrityError(
                    f"{self._what} has digest {digest}, expected {self._expected_digest}",
                    hint="the source is damaged; run bundle verify to find the bad part",
                )
        return data
