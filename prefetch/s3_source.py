"""Where the prefetch agent reads a model: the store ``sealift install`` loaded.

``s3://BUCKET/PREFIX/NAME/VERSION`` holds the model's files, ``.sealift/model-manifest.json``
(the ModelPack manifest: every file with its digest and size) and ``.sealift/signatures/*.sig``.
"""

from __future__ import annotations

from typing import Any, BinaryIO

from sealift.errors import InputError
from sealift.installer.object_store import (
    MODEL_MANIFEST_OBJECT,
    SIGNATURES_FOLDER,
    StoreTarget,
    fail,
)

MAX_DOCUMENT = 16 * 1024 * 1024


class S3ModelSource:
    """One model version in an S3-compatible store."""

    def __init__(self, client: Any, target: StoreTarget) -> None:
        self.client = client
        self.target = target
        self.description = target.url()
        # The version is the last component of the path: NAME/VERSION.
        self.version = target.prefix.rsplit("/", 1)[-1]

    def _read(self, key: str) -> bytes:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            response = self.client.get_object(Bucket=self.target.bucket, Key=key)
            if response.get("ContentLength", 0) > MAX_DOCUMENT:
                raise InputError(f"{self.target.url(key)} is too large for a manifest")
            return response["Body"].read()
        except ClientError as problem:
            code = problem.response.get("Error", {}).get("Code", "")
            if code in ("NoSuchKey", "404"):
                raise InputError(
                    f"{self.target.url(key)} does not exist",
                    hint="is the model installed there? check --source (s3://bucket/prefix/NAME/VERSION)",
                ) from problem
            raise fail(self.target, f"GET {key}", problem) from problem
        except BotoCoreError as problem:
            raise fail(self.target, f"GET {key}", problem) from problem

    def manifest(self) -> bytes:
        """The model manifest bytes."""
        return self._read(self.target.key(MODEL_MANIFEST_OBJECT))

    def signatures(self) -> list[tuple[str, bytes]]:
        """Every signature file beside the model, by object key."""
        from botocore.exceptions import BotoCoreError, ClientError

        prefix = self.target.key(SIGNATURES_FOLDER) + "/"
        try:
            listing = self.client.list_objects_v2(Bucket=self.target.bucket, Prefix=prefix)
        except (BotoCoreError, ClientError) as problem:
            raise fail(self.target, f"LIST {prefix}", problem) from problem
        keys = [o["Key"] for o in listing.get("Contents", []) if o["Key"].endswith(".sig")]
        return [(self.target.url(key), self._read(key)) for key in sorted(keys)]

    def open(self, path: str, offset: int) -> BinaryIO:
        """A stream over one file from ``offset`` (a ranged GET)."""
        from botocore.exceptions import BotoCoreError, ClientError

        key = self.target.key(path)
        try:
            response = self.client.get_object(
                Bucket=self.target.bucket, Key=key, Range=f"bytes={offset}-"
            )
        except ClientError as problem:
            raise fail(self.target, f"GET {key}", problem) from problem
        except BotoCoreError as problem:
            raise fail(self.target, f"GET {key}", problem) from problem
        return response["Body"]  # type: ignore[no-any-return]
