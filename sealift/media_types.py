"""Media types sealift reads and writes: OCI, Docker schema 2, Helm and CNCF ModelPack.

One table, so the reader, the writer and the verifier agree on what each type means.
"""

from __future__ import annotations

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_EMPTY = "application/vnd.oci.empty.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"
OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
OCI_LAYER_ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar"
DOCKER_LAYER_GZIP = "application/vnd.docker.image.rootfs.diff.tar.gzip"
DOCKER_FOREIGN_LAYER = "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip"

# Helm's OCI support (helm push / helm pull oci://).
HELM_CONFIG = "application/vnd.cncf.helm.config.v1+json"
HELM_CHART = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
HELM_PROVENANCE = "application/vnd.cncf.helm.chart.provenance.v1.prov"

# CNCF ModelPack (model-spec): one uncompressed layer per file, so a layer digest is the
# sha256 of the file itself and a model signature's per-file digests equal blob digests.
MODEL_ARTIFACT = "application/vnd.cncf.model.manifest.v1+json"
MODEL_CONFIG = "application/vnd.cncf.model.config.v1+json"
MODEL_WEIGHT_RAW = "application/vnd.cncf.model.weight.v1.raw"
MODEL_WEIGHT_CONFIG_RAW = "application/vnd.cncf.model.weight.config.v1.raw"
MODEL_DOC_RAW = "application/vnd.cncf.model.doc.v1.raw"
MODEL_CODE_RAW = "application/vnd.cncf.model.code.v1.raw"
MODEL_FILEPATH_ANNOTATION = "org.cncf.model.filepath"

# sealift's own artifacts: plain files carried in the bundle, and its SBOM.
FILE_ARTIFACT = "application/vnd.sealift.file.v1"
FILE_LAYER = "application/octet-stream"
SBOM_ARTIFACT = "application/vnd.cyclonedx+json"
SBOM_LAYER = "application/vnd.cyclonedx+json"

# A model signature (Sigstore bundle v0.3) carried in a registry next to its model.
SIGSTORE_BUNDLE = "application/vnd.dev.sigstore.bundle.v0.3+json"

REF_NAME_ANNOTATION = "org.opencontainers.image.ref.name"
TITLE_ANNOTATION = "org.opencontainers.image.title"

MANIFESTS = frozenset({OCI_MANIFEST, DOCKER_MANIFEST})
INDEXES = frozenset({OCI_INDEX, DOCKER_MANIFEST_LIST})
IMAGE_LAYERS = frozenset(
    {OCI_LAYER, OCI_LAYER_GZIP, OCI_LAYER_ZSTD, DOCKER_LAYER, DOCKER_LAYER_GZIP}
)
# Layers whose bytes are a (possibly gzip-compressed) tar the SBOM scanner can read.
SCANNABLE_LAYERS = frozenset(
    {OCI_LAYER, OCI_LAYER_GZIP, DOCKER_LAYER, DOCKER_LAYER_GZIP, DOCKER_FOREIGN_LAYER}
)

# What a registry is asked for when resolving a reference.
MANIFEST_ACCEPT = ", ".join((OCI_INDEX, OCI_MANIFEST, DOCKER_MANIFEST_LIST, DOCKER_MANIFEST))
