"""Prefetch from a registry: the model artifact ``sealift install --push-models`` pushed.

``oci://HOST/REPOSITORY:VERSION`` names the ModelPack manifest; its signatures are the artifact
tagged ``sha256-<manifest hex>.sig`` beside it (the tag scheme registries without the referrers
API use). Files are blobs, streamed from the offset a resume needs.
"""

from __future__ import annotations

from typing import Any, BinaryIO

from sealift import media_types
from sealift.bundles.model_folder import model_layers
from sealift.descriptors import children_of
from sealift.errors import InputError, IntegrityError
from sealift.image_reference import ImageReference, parse_reference
from sealift.installer.mirror import signature_tag
from sealift.registry_client import RegistryClient

MAX_SIGNATURE = 16 * 1024 * 1024


def parse_oci_source(text: str) -> ImageReference:
    """``oci://host[:port]/repository:version``."""
    reference = parse_reference(text.removeprefix("oci://"), what="--source")
    if not reference.tag or reference.digest:
        raise InputError(
            f"--source {text!r} names no version tag", hint="oci://HOST/models/NAME:VERSION"
        )
    return reference


class OciModelSource:
    """One model version in an OCI registry."""

    def __init__(self, client: RegistryClient, reference: ImageReference) -> None:
        self.client = client
        self.reference = reference
        self.description = f"oci://{reference}"
        self.version = reference.tag or ""
        self._layers: dict[str, tuple[str, int]] = {}
        self._digest = ""

    def manifest(self) -> bytes:
        """The model manifest bytes (their digest is what the signatures are found by)."""
        fetched = self.client.get_manifest(self.reference.repository, self.reference.reference)
        self._digest = fetched.digest
        layers = model_layers(fetched.content, where=f"model manifest {self.description}")
        self._layers = {layer.path: (layer.digest, layer.size) for layer in layers}
        return fetched.content

    def signatures(self) -> list[tuple[str, bytes]]:
        """The signature files of the artifact tagged for this model's digest."""
        if not self._digest:
            self.manifest()
        tag = signature_tag(self._digest)
        where = f"oci://{self.reference.registry}/{self.reference.repository}:{tag}"
        try:
            artifact = self.client.get_manifest(self.reference.repository, tag)
        except InputError:
            return []  # no signatures: the policy evaluation says what is missing
        found = []
        for layer in children_of(artifact.content, media_types.OCI_MANIFEST, where=where).layers:
            if layer.media_type != media_types.SIGSTORE_BUNDLE or layer.size > MAX_SIGNATURE:
                continue
            body = self.client.read_blob(
                self.reference.repository, layer.digest, layer.size, what=f"{where} signature"
            )
            found.append((f"{where}@{layer.digest}", body))
        return found

    def open(self, path: str, offset: int) -> BinaryIO:
        """A stream over one file from ``offset``."""
        if path not in self._layers:
            raise IntegrityError(f"{self.description}: {path} is not in the model manifest")
        digest, size = self._layers[path]
        reader: Any = self.client.open_blob(self.reference.repository, digest, size)
        reader.start_at(offset)
        return reader  # type: ignore[no-any-return]
