"""Put a bundle's model weights into the customer's S3-compatible object store.

Objects land at ``s3://BUCKET/PREFIX/MODEL/VERSION/FILE`` with their sha256 in the metadata
(``x-amz-meta-sha256``), uploaded in parallel multipart parts from a stream that is hashed as
boto3 reads it: a blob whose bytes do not match fails on its last read, before the upload is
completed, so no object with a wrong digest is ever published. An object already there with the
same sha256 and size is skipped. The model's manifest and its signatures go last: consumers
(the prefetch agent) trust nothing until they are there. Credentials come from the AWS chain
(environment, shared files, instance roles), never from the command line.
"""

from __future__ import annotations

import base64
import hashlib
import math
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from sealift.audit_log import AuditLog
from sealift.bundles import layout
from sealift.bundles.blob_source import BlobSource
from sealift.bundles.bundle_manifest import Artifact, BundleManifest
from sealift.bundles.model_folder import read_model_layers
from sealift.errors import InputError, IntegrityError, RemoteError
from sealift.hashing import VerifyingReader, sha256_bytes
from sealift.progress import Progress

SHA256_METADATA = "sha256"
MODEL_MANIFEST_OBJECT = ".sealift/model-manifest.json"
SIGNATURES_FOLDER = ".sealift/signatures"
MIN_PART = 16 * 1024 * 1024
MAX_PARTS = 9000  # below S3's 10,000 with room to spare


@dataclass(frozen=True)
class StoreTarget:
    """``s3://bucket/prefix`` and how to reach it."""

    bucket: str
    prefix: str
    endpoint: str | None = None
    region: str | None = None
    path_style: bool = False
    ca_file: str | None = None

    def key(self, *parts: str) -> str:
        """An object key under the prefix."""
        return "/".join(p.strip("/") for p in (self.prefix, *parts) if p.strip("/"))

    def url(self, key: str = "") -> str:
        return f"s3://{self.bucket}/{key}" if key else f"s3://{self.bucket}/{self.prefix}"


def parse_store_url(
    text: str,
    *,
    endpoint: str | None = None,
    region: str | None = None,
    path_style: bool = False,
    ca_file: str | None = None,
) -> StoreTarget:
    """Parse ``--weights s3://bucket/prefix``."""
    if not text.startswith("s3://") or len(text) <= len("s3://"):
        raise InputError(f"--weights {text!r} is not an s3:// URL", hint="e.g. s3://models/llm")
    bucket, _, prefix = text[len("s3://") :].partition("/")
    if not bucket or ".." in PurePosixPath(prefix).parts:
        raise InputError(
            f"--weights {text!r} has no bucket or an unsafe prefix", hint="s3://bucket/prefix"
        )
    return StoreTarget(bucket, prefix.strip("/"), endpoint, region, path_style, ca_file)


def make_client(target: StoreTarget, *, jobs: int) -> Any:
    """A boto3 S3 client for the target; credentials from the standard AWS chain."""
    import boto3
    from botocore.config import Config

    config = Config(
        s3={"addressing_style": "path" if target.path_style else "auto"},
        retries={"max_attempts": 8, "mode": "adaptive"},
        max_pool_connections=max(jobs * 2, 4),
        # Checksums only where asked: not every S3-compatible server speaks the new ones.
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    # A session of its own: boto3's module-level default caches credentials across calls.
    return boto3.session.Session().client(
        "s3",
        endpoint_url=target.endpoint,
        region_name=target.region or "us-east-1",
        config=config,
        verify=target.ca_file if target.ca_file else True,
    )


def fail(target: StoreTarget, action: str, problem: Exception) -> RemoteError:
    from botocore.exceptions import ClientError, NoCredentialsError

    if isinstance(problem, NoCredentialsError):
        return RemoteError(
            f"no credentials for the object store {target.url()}",
            hint="set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE or ~/.aws/credentials",
        )
    if isinstance(problem, ClientError):
        code = problem.response.get("Error", {}).get("Code", "error")
        hints = {
            # HEAD requests carry no error body: S3 then reports only the status code.
            "404": "the bucket does not exist: create it first, or check --weights",
            "403": "the credentials lack permission for this bucket and prefix",
            "NoSuchBucket": "the bucket does not exist: create it first, or check --weights",
            "AccessDenied": "the credentials lack permission for this bucket and prefix",
            "InvalidAccessKeyId": "check the access key id",
            "SignatureDoesNotMatch": "check the secret access key",
        }
        return RemoteError(
            f"object store {target.url()}: {action} failed ({code})",
            hint=hints.get(code, "check the store's logs"),
        )
    return RemoteError(
        f"object store {target.endpoint or target.url()} is unreachable during {action}"
        f" ({type(problem).__name__})",
        hint="check --s3-endpoint, the network and the CA (--ca-file)",
    )


def preflight(client: Any, target: StoreTarget) -> bool:
    """Bucket reachable and writable, before any byte moves.

    Returns whether the server verifies SHA-256 checksums on upload (``x-amz-checksum-sha256``):
    the probe object is written with one, and a server that refuses the header is used without.
    """
    from botocore.exceptions import BotoCoreError, ClientError

    probe = target.key(".sealift/preflight")
    body = b"sealift preflight\n"
    checksum = base64.b64encode(hashlib.sha256(body).digest()).decode()
    try:
        client.head_bucket(Bucket=target.bucket)
        try:
            client.put_object(Bucket=target.bucket, Key=probe, Body=body, ChecksumSHA256=checksum)
            checksums = True
        except ClientError as refused:
            code = refused.response.get("Error", {}).get("Code", "")
            if code not in ("NotImplemented", "InvalidArgument", "InvalidRequest", "BadDigest"):
                raise
            client.put_object(Bucket=target.bucket, Key=probe, Body=body)
            checksums = False
        client.delete_object(Bucket=target.bucket, Key=probe)
    except (BotoCoreError, ClientError) as problem:
        raise fail(target, "the preflight check (head bucket, write, delete)", problem) from problem
    return checksums


@dataclass(frozen=True)
class StoreResult:
    """Counts for the summary."""

    models: int
    uploaded: int
    present: int
    bytes_uploaded: int


def upload_models(
    source: BlobSource,
    manifest: BundleManifest,
    client: Any,
    target: StoreTarget,
    *,
    jobs: int,
    progress: Progress,
    audit: AuditLog,
    checksums: bool = False,
) -> StoreResult:
    """Upload every model's files (their manifests follow in :func:`publish_model_manifests`).

    With ``checksums`` the server verifies too: a single-part object carries its whole-file
    SHA-256 (``x-amz-checksum-sha256``, the same digest as the metadata); a multipart one
    carries per-part SHA-256 checksums, since S3 has no whole-object SHA-256 for multipart.
    """
    from boto3.s3.transfer import TransferConfig
    from botocore.exceptions import BotoCoreError, ClientError

    models = [a for a in manifest.artifacts if a.kind == "model"]
    work: list[tuple[Artifact, str, str, int]] = []
    for artifact in models:
        _, layers = read_model_layers(source, artifact)
        work.extend((artifact, layer.path, layer.digest, layer.size) for layer in layers)
    counts = {"uploaded": 0, "present": 0, "bytes": 0}
    lock = threading.Lock()

    def existing_sha(key: str, size: int) -> str | None:
        try:
            head = client.head_object(Bucket=target.bucket, Key=key)
        except ClientError as problem:
            if problem.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise fail(target, f"HEAD {key}", problem) from problem
        if head.get("ContentLength") != size:
            return None
        return head.get("Metadata", {}).get(SHA256_METADATA)

    total = sum(size for _, _, _, size in work)
    with progress.task("upload weights", total) as bar:

        def one(item: tuple[Artifact, str, str, int]) -> None:
            artifact, path, digest, size = item
            key = target.key(artifact.name, artifact.version, path)
            hexdigest = digest.removeprefix("sha256:")
            if existing_sha(key, size) == hexdigest:
                bar.update(size)
                with lock:
                    counts["present"] += 1
                audit.record("object-present", key=key, digest=digest, size=size)
                return
            part = max(MIN_PART, math.ceil(size / MAX_PARTS))
            config = TransferConfig(
                multipart_threshold=part,
                multipart_chunksize=part,
                max_concurrency=2,
                use_threads=True,
            )
            name = layout.blob_name(digest)
            where = source.location(name)
            extra: dict[str, Any] = {
                "Metadata": {SHA256_METADATA: hexdigest},
                "ContentType": "application/octet-stream",
            }
            if checksums and size <= part:
                extra["ChecksumSHA256"] = base64.b64encode(bytes.fromhex(hexdigest)).decode()
            elif checksums:
                extra["ChecksumAlgorithm"] = "SHA256"
            with source.open(name) as stream:
                reader = VerifyingReader(
                    stream,
                    expected_digest=digest,
                    expected_size=size,
                    what=f"{path} of model {artifact.name} [{where}]",
                    on_bytes=bar.update,
                )
                try:
                    client.upload_fileobj(
                        reader, target.bucket, key, ExtraArgs=extra, Config=config
                    )
                except IntegrityError:
                    raise
                except (BotoCoreError, ClientError) as problem:
                    raise fail(target, f"upload of {key}", problem) from problem
            with lock:
                counts["uploaded"] += 1
                counts["bytes"] += size
            audit.record("object-uploaded", key=key, digest=digest, size=size)

        with ThreadPoolExecutor(max(jobs, 1), thread_name_prefix="s3") as pool:
            for future in [pool.submit(one, item) for item in work]:
                future.result()

    return StoreResult(len(models), counts["uploaded"], counts["present"], counts["bytes"])


def publish_model_manifests(
    source: BlobSource,
    manifest: BundleManifest,
    client: Any,
    target: StoreTarget,
    *,
    audit: AuditLog,
) -> None:
    """Last: each model's manifest and signatures, what a consumer needs to trust the objects."""
    from botocore.exceptions import BotoCoreError, ClientError

    for artifact in (a for a in manifest.artifacts if a.kind == "model"):
        content, _ = read_model_layers(source, artifact)
        base = (artifact.name, artifact.version)
        objects = [(target.key(*base, MODEL_MANIFEST_OBJECT), content)]
        prefix = layout.model_signature_prefix(artifact.name, artifact.version)
        for name in source.signature_names():
            if name.startswith(prefix):
                signer_file = name[len(prefix) :]
                objects.append(
                    (target.key(*base, SIGNATURES_FOLDER, signer_file), source.read_signature(name))
                )
        for key, body in objects:
            try:
                client.put_object(
                    Bucket=target.bucket,
                    Key=key,
                    Body=body,
                    Metadata={SHA256_METADATA: sha256_bytes(body).removeprefix("sha256:")},
                    ContentType="application/json",
                )
            except (BotoCoreError, ClientError) as problem:
                raise fail(target, f"upload of {key}", problem) from problem
            audit.record("object-published", key=key, digest=sha256_bytes(body), size=len(body))
