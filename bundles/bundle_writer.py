"""What ``bundle create`` writes through: a directory or a (split) tar stream.

Both writers publish nothing that looks complete before the end: blobs land under temporary
names and are renamed once their digest is verified; the tar is ``.partial`` until its last
byte; the bundle manifest is the last file written.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import BinaryIO, Protocol

from sealift.hashing import CopyResult, Sink


class BundleWriter(Protocol):
    """The operations create needs from an output form."""

    #: Whether ``write_blob`` may run in several threads at once.
    concurrent: bool

    def has_blob(self, digest: str, size: int) -> bool:
        """Whether a verified copy of the blob is already written (a re-run reuses it)."""
        ...

    def bytes_needed(self, sizes: Sequence[tuple[str | None, int]]) -> int:
        """Bytes still to write for these (digest, size) blobs, headers included."""
        ...

    def check_space(self, needed: int) -> None:
        """Refuse to start when the output's filesystem cannot hold ``needed`` more bytes."""
        ...

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
        """Stream one blob in, hashing it; verify against ``digest`` when it is known."""
        ...

    def write_document(self, content: bytes) -> str:
        """Store a small blob (manifest, config, SBOM) and return its digest."""
        ...

    def commit(self, files: Sequence[tuple[str, bytes]]) -> list[str]:
        """Make the blobs durable, then write the top-level ``files`` in order (the bundle
        manifest last) and make the bundle visible; returns the paths written."""
        ...

    def abort(self) -> None:
        """Remove temporary files; keep what is complete and verified for a re-run."""
        ...
