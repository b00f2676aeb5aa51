"""``sealift prefetch``: land verified weights on the node's local NVMe.

1. Read the model manifest and its signatures; check them against the trust policy. Only files
   the trusted signatures list are fetched; nothing unsigned is.
2. Check free space for what is still missing.
3. Fetch files in parallel, each as one ranged GET hashed while it streams into a staging folder
   on the same filesystem. A dropped stream is resumed from the byte it reached (the hash keeps
   running); a partial file from a killed run is resumed by range after re-hashing the part on
   disk. A file whose digest fails is fetched once more, then the run fails.
4. fsync, READY, one atomic rename into ``DEST/NAME/HEX`` and ``current`` switched.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from sealift.bundles.model_folder import ModelLayer, model_layers
from sealift.descriptors import load_json
from sealift.durable_files import write_atomically
from sealift.errors import IntegrityError, RemoteError, ResourceError
from sealift.hashing import CHUNK_SIZE, sha256_bytes
from sealift.prefetch.model_store import ModelStore, check_model_name
from sealift.progress import Progress
from sealift.retry import RetryPolicy
from sealift.signing.signature_file import read_signature_file
from sealift.signing.trust_policy import TrustPolicy, evaluate
from sealift.signing.weights import agreeing_manifest, check_subject, compare


class ModelSource(Protocol):
    """Where a model version is read from: the S3 store or a registry."""

    description: str
    version: str

    def manifest(self) -> bytes:
        """The model manifest."""
        ...

    def signatures(self) -> list[tuple[str, bytes]]:
        """Its signature files, by where they came from."""
        ...

    def open(self, path: str, offset: int) -> BinaryIO:
        """One file from ``offset``."""
        ...


@dataclass
class PrefetchMetrics:
    """What the DaemonSet's /metrics reports; updated from the download threads."""

    bytes_total: int = 0
    bytes_done: int = 0
    retries: int = 0
    verify_failures: int = 0
    ready: bool = False
    started: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, count: int) -> None:
        with self.lock:
            self.bytes_done += count

    def prometheus(self) -> str:
        """The metrics in Prometheus text format."""
        elapsed = max(time.monotonic() - self.started, 1e-9)
        lines = [
            "# HELP sealift_prefetch_bytes_total Bytes of the model to fetch.",
            "# TYPE sealift_prefetch_bytes_total gauge",
            f"sealift_prefetch_bytes_total {self.bytes_total}",
            "# HELP sealift_prefetch_bytes_done Bytes fetched and hashed so far.",
            "# TYPE sealift_prefetch_bytes_done counter",
            f"sealift_prefetch_bytes_done {self.bytes_done}",
            "# HELP sealift_prefetch_rate_bytes_per_second Average rate since start.",
            "# TYPE sealift_prefetch_rate_bytes_per_second gauge",
            f"sealift_prefetch_rate_bytes_per_second {self.bytes_done / elapsed:.0f}",
            "# HELP sealift_prefetch_retries_total Streams resumed after a fault.",
            "# TYPE sealift_prefetch_retries_total counter",
            f"sealift_prefetch_retries_total {self.retries}",
            "# HELP sealift_prefetch_verify_failures_total Files whose digest did not match.",
            "# TYPE sealift_prefetch_verify_failures_total counter",
            f"sealift_prefetch_verify_failures_total {self.verify_failures}",
            "# HELP sealift_prefetch_ready 1 when the verified copy is in place.",
            "# TYPE sealift_prefetch_ready gauge",
            f"sealift_prefetch_ready {int(self.ready)}",
        ]
        return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class PrefetchResult:
    """Where the verified copy is and what it took."""

    path: Path
    name: str
    manifest_digest: str
    files: int
    bytes_fetched: int
    bytes_reused: int
    signers: tuple[str, ...]
    removed_versions: tuple[str, ...]


def _rehash(path: Path, size_limit: int) -> tuple[Any, int]:
    """The hash state of a partial file from a killed run, to resume it by range."""
    hasher = hashlib.sha256()
    done = 0
    with path.open("rb") as handle:
        while done < size_limit and (chunk := handle.read(min(CHUNK_SIZE, size_limit - done))):
            hasher.update(chunk)
            done += len(chunk)
    return hasher, done


def _transient(problem: BaseException) -> bool:
    """A fault of the network or the store, worth resuming by range (botocore's and urllib3's
    streaming errors share no base class with the standard ones)."""
    return isinstance(problem, ConnectionError | OSError | RemoteError) or type(
        problem
    ).__module__.startswith(("botocore", "urllib3"))


def _fetch_file(
    source: ModelSource,
    store: ModelStore,
    layer: ModelLayer,
    *,
    retry: RetryPolicy,
    metrics: PrefetchMetrics,
    on_bytes: Any,
) -> int:
    """Fetch one file into staging, hashed while it streams; returns the bytes fetched."""
    target = store.staged(layer.path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fetched = 0
    for attempt in (1, 2):  # a file that fails its digest is fetched once more from scratch
        hasher, offset = hashlib.sha256(), 0
        if attempt == 1 and target.exists() and target.stat().st_size <= layer.size:
            hasher, offset = _rehash(target, layer.size)
            on_bytes(offset)
        with target.open("r+b" if offset else "wb") as handle:
            handle.truncate(offset)
            handle.seek(offset)
            failures = 0
            while offset < layer.size:
                stream = None
                try:
                    stream = source.open(layer.path, offset)
                    while chunk := stream.read(CHUNK_SIZE):
                        if offset + len(chunk) > layer.size:
                            raise IntegrityError(
                                f"{source.description}/{layer.path} is longer than its signed size",
                                hint="the object in the store was replaced; re-run install",
                            )
                        try:
                            handle.write(chunk)
                        except OSError as full:
                            # A local disk problem is not the network's: do not retry it.
                            raise ResourceError(
                                f"cannot write {target} ({full.strerror})",
                                hint="check free space and permissions on the node's NVMe",
                            ) from full
                        hasher.update(chunk)
                        offset += len(chunk)
                        fetched += len(chunk)
                        on_bytes(len(chunk))
                    if offset < layer.size:
                        raise ConnectionError("stream ended early")
                except Exception as problem:
                    if not _transient(problem):
                        raise
                    failures += 1
                    with metrics.lock:
                        metrics.retries += 1
                    if failures >= retry.attempts:
                        raise RemoteError(
                            f"{source.description}/{layer.path}: download kept failing at byte"
                            f" {offset} ({type(problem).__name__})",
                            hint="check the store and the network, then run prefetch again",
                        ) from problem
                    time.sleep(retry.delay(failures))
                finally:
                    if stream is not None:
                        stream.close()  # a dropped stream returns its connection to the pool
            handle.flush()
            os.fsync(handle.fileno())
        digest = "sha256:" + hasher.hexdigest()
        if digest == layer.digest:
            marker = store.marker(layer.path)
            marker.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(marker, json.dumps({"digest": digest, "size": layer.size}).encode())
            return fetched
        with metrics.lock:
            metrics.verify_failures += 1
        target.unlink(missing_ok=True)
        on_bytes(-offset)
    raise IntegrityError(
        f"{source.description}/{layer.path} has digest {digest} twice, signed {layer.digest}",
        hint="the object in the store does not match its signature: re-run install, then prefetch",
    )


def _verified_before(store: ModelStore, layer: ModelLayer) -> bool:
    try:
        record = json.loads(store.marker(layer.path).read_text())
    except (OSError, ValueError):
        return False
    staged = store.staged(layer.path)
    return (
        record.get("digest") == layer.digest
        and staged.exists()
        and staged.stat().st_size == layer.size
    )


def prefetch(
    source: ModelSource,
    dest: Path,
    policy: TrustPolicy,
    *,
    jobs: int = 4,
    keep: int = 2,
    progress: Progress | None = None,
    metrics: PrefetchMetrics | None = None,
    retry: RetryPolicy | None = None,
) -> PrefetchResult:
    """Fetch and verify one model version into ``dest``; returns where it is."""
    progress = progress or Progress()
    metrics = metrics or PrefetchMetrics()
    retry = retry or RetryPolicy()
    content = source.manifest()
    digest = sha256_bytes(content)
    where = f"model manifest {source.description}"
    layers = model_layers(content, where=where)
    annotations = load_json(content, where=where).get("annotations") or {}
    name = check_model_name(str(annotations.get("org.opencontainers.image.title", "")))
    version = str(annotations.get("org.opencontainers.image.version", ""))
    if source.version != version:
        raise IntegrityError(
            f"{where} is for version {version!r}, not the one --source names",
            hint="the store holds another version at this path; re-run install",
        )
    # Signatures first: nothing is fetched unless the trusted signers list exactly these files.
    signatures = [(key, read_signature_file(body, source=key)) for key, body in source.signatures()]
    subject = f"model {name} at {source.description}"
    verdict = evaluate(policy, policy.weights, signatures, subject=subject)  # type: ignore[arg-type]
    signed, _ = agreeing_manifest(verdict, subject=subject)
    check_subject(signed, name, version, subject=subject)
    compare(signed, {layer.path: layer.digest for layer in layers}, subject=subject)
    # Only what the signatures list is fetched and published (never an ignored extra).
    layers = tuple(layer for layer in layers if layer.path in signed.digests())
    store = ModelStore(dest, name, digest.removeprefix("sha256:"))
    total = sum(layer.size for layer in layers)
    metrics.bytes_total = total
    if store.ready_record() is not None:
        store.point_current()
        metrics.add(total)
        metrics.ready = True
        removed = store.remove_old_versions(keep)
        return PrefetchResult(store.final, name, digest, len(layers), 0, total,
                              tuple(sorted(verdict.accepted)), tuple(removed))  # fmt: skip
    lock = store.lock()
    try:
        todo = [layer for layer in layers if not _verified_before(store, layer)]
        reused = total - sum(layer.size for layer in todo)
        partial = sum(
            min(store.staged(layer.path).stat().st_size, layer.size)
            for layer in todo
            if store.staged(layer.path).exists()
        )
        store.check_space(sum(layer.size for layer in todo) - partial + 16 * 1024 * 1024)
        metrics.add(reused)
        fetched = 0
        with progress.task("prefetch", sum(layer.size for layer in todo)) as bar:

            def on_bytes(count: int) -> None:
                bar.update(count)
                metrics.add(count)

            # Largest first, so parallel streams finish together.
            todo.sort(key=lambda layer: -layer.size)
            pool = ThreadPoolExecutor(max(jobs, 1), thread_name_prefix="prefetch")
            try:
                futures = [
                    pool.submit(
                        _fetch_file,
                        source,
                        store,
                        layer,
                        retry=retry,
                        metrics=metrics,
                        on_bytes=on_bytes,
                    )
                    for layer in todo
                ]
                for future in futures:
                    fetched += future.result()
            except BaseException:
                # The first failure ends the run: files not started yet are not started.
                pool.shutdown(wait=True, cancel_futures=True)
                raise
            pool.shutdown(wait=True)
        store.publish(
            {
                "manifestDigest": digest,
                "name": name,
                "source": source.description,
                "files": {layer.path: layer.digest for layer in layers},
                "signers": {n: identity for n, (identity, _) in sorted(verdict.accepted.items())},
                "policy": policy.source,
                "verifiedAt": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            }
        )
    finally:
        store.unlock(lock)
    metrics.ready = True
    removed = store.remove_old_versions(keep)
    return PrefetchResult(
        path=store.final,
        name=name,
        manifest_digest=digest,
        files=len(layers),
        bytes_fetched=fetched,
        bytes_reused=reused,
        signers=tuple(sorted(verdict.accepted)),
        removed_versions=tuple(removed),
    )
