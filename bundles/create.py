"""``sealift bundle create``: sources → hashed streams → one OCI layout → bundle manifest.

The order is what keeps a bundle honest: read the small documents first (manifests, charts, the
model folder listing) and refuse bad input before a byte is copied; check free space; stream
every blob once (hashing it, and scanning image layers for packages on the same pass); then write
the manifests, the SBOM, ``index.json`` and, last, the bundle manifest.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from sealift import __version__, media_types
from sealift.bundles import layout
from sealift.bundles.blob_source import BlobSource
from sealift.bundles.bundle_file import BundleSpec
from sealift.bundles.bundle_manifest import Artifact, BundleManifest
from sealift.bundles.bundle_writer import BundleWriter
from sealift.bundles.create_journal import CreateJournal
from sealift.bundles.directory_writer import DirectoryWriter
from sealift.bundles.helm_chart import ChartPackage, load_chart, pull_chart
from sealift.bundles.image_sources import BlobTask, ResolvedImage, resolve_image
from sealift.bundles.model_folder import ModelFile, build_model_artifact, list_model_files
from sealift.bundles.package_scan import (
    BackgroundLayerScanner,
    FoundPackage,
    LayerScan,
    LayerScanError,
    merge_image_packages,
)
from sealift.bundles.prefetch_image import build_prefetch_image
from sealift.bundles.sbom import (
    SbomBundle,
    SbomChart,
    SbomFile,
    SbomImage,
    SbomModel,
    SbomModelFile,
    build_sbom,
)
from sealift.bundles.tar_writer import TarWriter
from sealift.descriptors import Descriptor, artifact_manifest, canonical_json
from sealift.docker_auth import load_credentials
from sealift.errors import InputError
from sealift.image_reference import parse_reference
from sealift.progress import Progress
from sealift.registry_client import RegistryClient
from sealift.signing.bundle_statement import bundle_statement
from sealift.signing.model_manifest import ModelManifest
from sealift.signing.signers import Signer
from sealift.signing.weights import model_subject


@dataclass(frozen=True)
class CreateOptions:
    """How and where to write the bundle, and how to reach source registries."""

    output: Path
    split: int | None = None
    tmpdir: Path | None = None
    jobs: int = 4
    plain_http: frozenset[str] = frozenset()
    ca_file: str | None = None
    auth_file: Path | None = None
    # Sign every model and the bundle manifest (model-signing format) as ``signer_name``.
    signer: Signer | None = None
    signer_name: str = "vendor"

    @property
    def as_tar(self) -> bool:
        """A tar is written when asked to split or when the output is named ``*.tar``."""
        return self.split is not None or self.output.suffix == ".tar"


@dataclass(frozen=True)
class CreateResult:
    """What was written."""

    manifest: BundleManifest
    paths: tuple[str, ...]
    warnings: tuple[str, ...]
    bytes_copied: int
    bytes_reused: int


@dataclass
class _Plan:
    images: list[ResolvedImage] = field(default_factory=list)
    charts: list[ChartPackage] = field(default_factory=list)
    models: list[tuple[str, str, tuple[ModelFile, ...]]] = field(default_factory=list)
    tasks: list[BlobTask] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _client_factory(options: CreateOptions, progress: Progress) -> Callable[[str], RegistryClient]:
    clients: dict[str, RegistryClient] = {}
    lock = threading.Lock()

    def client_for(registry: str) -> RegistryClient:
        with lock:
            if registry not in clients:
                clients[registry] = RegistryClient(
                    registry,
                    plain_http=registry in options.plain_http,
                    ca_file=options.ca_file,
                    credentials=load_credentials(registry, auth_file=options.auth_file),
                    connections=options.jobs + 2,
                    on_retry=lambda text: progress.note(text, level="warning"),
                )
            return clients[registry]

    return client_for


def _chart_warnings(chart: ChartPackage, image_names: set[str]) -> list[str]:
    warnings = []
    for image in chart.images:
        try:
            reference = parse_reference(image, what=f"chart {chart.name} image")
        except InputError:
            warnings.append(f"chart {chart.name} names image {image!r}, which sealift cannot parse")
            continue
        # A vendor often pulls from its own mirror (registry/prefix/nvidia/x): match by suffix.
        if not any(
            name == reference.name or name.endswith("/" + reference.name) for name in image_names
        ):
            warnings.append(
                f"chart {chart.name} {chart.version} names image {image},"
                " which is not in the bundle"
            )
    return warnings


def _plan(
    spec: BundleSpec,
    options: CreateOptions,
    progress: Progress,
    opened: list[BlobSource],
    scratch: ExitStack,
) -> _Plan:
    plan = _Plan()
    client_for = _client_factory(options, progress)
    for image in spec.images:
        progress.note(f"resolving image {image.name} from {image.origin}")
        plan.images.append(resolve_image(image, client_for=client_for, opened=opened))
    for chart_spec in spec.charts:
        if chart_spec.ref is not None:
            progress.note(f"pulling chart {chart_spec.origin}")
            client = client_for(chart_spec.ref.registry)
            plan.charts.append(pull_chart(client, chart_spec.ref))
        else:
            assert chart_spec.path is not None
            plan.charts.append(load_chart(chart_spec.path))
    image_names = {image.name for image in spec.images}
    for chart in plan.charts:
        plan.warnings.extend(_chart_warnings(chart, image_names))
    for model in spec.models:
        files = list_model_files(model.path, exclude=model.exclude)
        plan.models.append((model.name, model.version, files))
        for item in files:
            plan.tasks.append(
                BlobTask(
                    what=f"{item.relative_path} of model {model.name}",
                    digest=None,
                    size=item.size,
                    media_type=item.media_type,
                    open=lambda p=item.path: p.open("rb"),  # type: ignore[misc]
                    data_name=layout.model_data_name(model.name, model.version, item.relative_path),
                    source_path=item.path,
                )
            )
    for extra in spec.files:
        if not extra.path.is_file():
            raise InputError(f"file {extra.path} does not exist", hint="check files[].path")
        plan.tasks.append(
            BlobTask(
                what=f"file {extra.name}",
                digest=extra.sha256,
                size=extra.path.stat().st_size,
                media_type=media_types.FILE_LAYER,
                open=lambda p=extra.path: p.open("rb"),  # type: ignore[misc]
                data_name=layout.file_data_name(extra.name),
                source_path=extra.path,
            )
        )
    if spec.prefetch_image is not None:
        # Built last, once every other input has been checked: it takes a few seconds. Its
        # layer waits in a temporary folder until the copy; the base's layers are shared.
        base = next(i for i in plan.images if i.spec.name == spec.prefetch_image.base)
        work = scratch.enter_context(
            tempfile.TemporaryDirectory(prefix="sealift-prefetch-", dir=options.tmpdir)
        )
        plan.images.append(
            build_prefetch_image(
                spec.prefetch_image,
                base,
                bundle_file=spec.source,
                work=Path(work),
                progress=progress,
            )
        )
    # Registry blobs last: local files go first, so a resumed run finds them done early and
    # the network's slowness does not hold up the disk.
    seen: set[str] = set()
    for resolved in plan.images:
        for task in resolved.blobs:
            assert task.digest is not None
            if task.digest not in seen:
                seen.add(task.digest)
                plan.tasks.append(task)
    return plan


class _Copier:
    """Runs the blob copies: in parallel into a directory, in order into a tar."""

    def __init__(self, writer: BundleWriter, options: CreateOptions, progress: Progress) -> None:
        self.writer = writer
        self.options = options
        self.progress = progress
        self.digests: dict[int, str] = {}
        self.scans: dict[str, LayerScan | None] = {}
        self.copied = 0
        self.reused = 0
        self._lock = threading.Lock()
        self._cancelled = threading.Event()

    def run_tar(self, tasks: list[BlobTask], journal: CreateJournal) -> None:
        """Write blobs in plan order into the tar, skipping what an interrupted run made durable."""
        writer = self.writer
        assert isinstance(writer, TarWriter)
        writer.keep_on_abort()
        if journal.resuming:
            writer.resume(journal.offset, journal.parts)
            self.progress.note(f"resuming {self.options.output.name} from byte {journal.offset}")
        total = sum(task.size for task in tasks)
        with self.progress.task("copy", total) as bar:
            for number, task in enumerate(tasks):
                name = writer.entry_name(task.digest, task.data_name)
                if task.digest is not None and writer.has_blob(task.digest, task.size):
                    self.digests[number] = task.digest
                    bar.update(task.size)
                    continue
                end = writer.position + writer.span(name, task.size)
                if number in journal.digests and end <= journal.offset:
                    digest = journal.digests[number]
                    writer.skip_entry(name, task.size, digest)
                    self.digests[number] = digest
                    if task.scan:
                        self.scans[digest] = journal.scans.get(digest)
                    self.reused += task.size
                    bar.update(task.size)
                    continue
                self._one(number, task, bar.update)
                digest = self.digests[number]
                journal.digests[number] = digest
                if task.scan:
                    journal.scans[digest] = self.scans.get(digest)
                journal.offset, journal.parts = writer.checkpoint()
                journal.save()

    def run(self, tasks: list[BlobTask]) -> None:
        pending = []
        writer = self.writer
        assert isinstance(writer, DirectoryWriter)
        for number, task in enumerate(tasks):
            known = task.digest
            if known is None and task.source_path is not None:
                known = writer.remembered_digest(task.source_path, task.size)
            if known is not None and writer.has_blob(known, task.size):
                self.digests[number] = known
                self.reused += task.size
                if task.scan:
                    self.scans[known] = self._rescan(task)
                continue
            pending.append((number, task))
        total = sum(task.size for _, task in pending)
        with self.progress.task("copy", total) as bar:
            if self.writer.concurrent and self.options.jobs > 1:
                with ThreadPoolExecutor(self.options.jobs, thread_name_prefix="copy") as pool:
                    futures = [pool.submit(self._one, n, t, bar.update) for n, t in pending]
                    done, _ = wait(futures, return_when=FIRST_EXCEPTION)
                    for future in done:
                        if future.exception() is not None:
                            self._cancelled.set()
                            for other in futures:
                                other.cancel()
                            failure = future.exception()
                            assert failure is not None
                            raise failure
            else:
                for number, task in pending:
                    self._one(number, task, bar.update)

    def _rescan(self, task: BlobTask) -> LayerScan | None:
        # The blob is already in the bundle from an interrupted run: scan that local copy.
        if not isinstance(self.writer, DirectoryWriter) or task.digest is None:
            return None
        scanner = BackgroundLayerScanner(task.media_type)
        path = self.writer.root / layout.blob_name(task.digest)
        with path.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                scanner.write(chunk)
        return _finish_scan(scanner)

    def _one(self, number: int, task: BlobTask, on_bytes: Callable[[int], None]) -> None:
        if self._cancelled.is_set():
            return

        def counted(count: int) -> None:
            if self._cancelled.is_set():
                raise InputError("cancelled after another copy failed")
            on_bytes(count)

        scanner = None
        if task.scan:
            scanner = BackgroundLayerScanner(task.media_type)
        source: BinaryIO = task.open()
        try:
            result = self.writer.write_blob(
                source,
                digest=task.digest,
                size=task.size,
                what=task.what,
                data_name=task.data_name,
                extra_sinks=(scanner,) if scanner is not None else (),
                on_bytes=counted,
            )
        except BaseException:
            if scanner is not None:
                scanner.abort()
            raise
        finally:
            source.close()
        if task.source_path is not None and isinstance(self.writer, DirectoryWriter):
            self.writer.remember_digest(task.source_path, task.size, result.digest)
        with self._lock:
            self.digests[number] = result.digest
            self.copied += result.size
            if task.scan:
                self.scans[result.digest] = _finish_scan(scanner) if scanner is not None else None


def _plan_key(plan: _Plan, options: CreateOptions) -> str:
    """What a resumed tar must have been started from: the same entries in the same order."""
    entries = []
    for task in plan.tasks:
        identity: list[object] = [task.digest or task.data_name, task.size]
        if task.source_path is not None:
            # An edited file (even of the same size) must not be spliced onto its old bytes.
            info = task.source_path.stat()
            identity += [info.st_mtime_ns, info.st_ino]
        entries.append(identity)
    document = {"version": __version__, "split": options.split, "entries": entries}
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()


def _refuse_stale_parts(output: Path) -> None:
    first = output.with_name(layout.part_name(output.name, 0))
    if first.exists():
        raise InputError(
            f"output {first} exists but no resume journal does",
            hint=f"remove {output.name}.* or choose another -o",
        )


def _finish_scan(scanner: BackgroundLayerScanner) -> LayerScan | None:
    """The scan's result, or None when the layer could not be scanned (zstd, not a tar): the
    SBOM then lists the layer as unscanned rather than failing the bundle."""
    try:
        return scanner.finish()
    except LayerScanError:
        return None


def create_bundle(spec: BundleSpec, options: CreateOptions, progress: Progress) -> CreateResult:
    """Build the bundle described by ``spec``; nothing looks complete unless all of it is."""
    opened: list[BlobSource] = []
    writer: BundleWriter | None = None
    scratch = ExitStack()
    try:
        plan = _plan(spec, options, progress, opened, scratch)
        for warning in plan.warnings:
            progress.note(warning, level="warning")
        if options.as_tar:
            writer = TarWriter(options.output, part_size=options.split)
        else:
            writer = DirectoryWriter(options.output, tmpdir=options.tmpdir)
        writer.check_space(writer.bytes_needed([(t.digest, t.size) for t in plan.tasks]))
        copier = _Copier(writer, options, progress)
        journal = None
        if isinstance(writer, TarWriter):
            journal = CreateJournal.for_output(options.output, _plan_key(plan, options))
            if not journal.resuming:
                _refuse_stale_parts(options.output)
            copier.run_tar(plan.tasks, journal)
        else:
            copier.run(plan.tasks)
        manifest, files = _finish(spec, plan, copier, writer, options)
        paths = writer.commit(files)
        if journal is not None:
            journal.remove()
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    finally:
        for source in opened:
            source.close()
        scratch.close()
    return CreateResult(
        manifest=manifest,
        paths=tuple(paths),
        warnings=tuple(plan.warnings),
        bytes_copied=copier.copied,
        bytes_reused=copier.reused,
    )


def _image_packages(
    resolved: ResolvedImage, scans: dict[str, LayerScan | None]
) -> tuple[tuple[FoundPackage, ...], tuple[str, ...]]:
    packages: set[FoundPackage] = set()
    unscanned: set[str] = set()
    for layers in resolved.layers_by_manifest.values():
        found = []
        for digest in layers:
            scan = scans.get(digest)
            if scan is None:
                unscanned.add(digest)
            else:
                found.append(scan)
        packages.update(merge_image_packages(found))
    return tuple(sorted(packages, key=lambda p: (p.ecosystem, p.name, p.version, p.arch))), tuple(
        sorted(unscanned)
    )


def _finish(
    spec: BundleSpec, plan: _Plan, copier: _Copier, writer: BundleWriter, options: CreateOptions
) -> tuple[BundleManifest, list[tuple[str, bytes]]]:
    artifacts: list[Artifact] = []
    index_entries: list[Descriptor] = []
    sbom_images: list[SbomImage] = []
    sbom_charts: list[SbomChart] = []
    sbom_models: list[SbomModel] = []
    sbom_files: list[SbomFile] = []

    stored: dict[str, int] = {}
    signatures: list[tuple[str, bytes]] = []

    def store(content: bytes) -> str:
        digest = writer.write_document(content)
        stored[digest] = len(content)
        return digest

    def add(artifact: Artifact, descriptor: Descriptor) -> None:
        artifacts.append(artifact)
        annotations = dict(descriptor.annotations)
        annotations[media_types.REF_NAME_ANNOTATION] = artifact.ref
        index_entries.append(
            Descriptor(
                media_type=descriptor.media_type,
                digest=descriptor.digest,
                size=descriptor.size,
                platform=descriptor.platform,
                annotations=tuple(sorted(annotations.items())),
                artifact_type=descriptor.artifact_type,
            )
        )

    for resolved in plan.images:
        for content in resolved.documents.values():
            store(content)
        root = resolved.root
        add(
            Artifact(
                kind="image",
                name=resolved.spec.name,
                ref=resolved.spec.name,
                media_type=root.media_type,
                digest=root.digest,
                size=root.size,
                source=resolved.source,
                platforms=resolved.platforms,
            ),
            Descriptor(root.media_type, root.digest, root.size, platform=root.platform),
        )
        packages, unscanned = _image_packages(resolved, copier.scans)
        sbom_images.append(
            SbomImage(
                ref=resolved.spec.name,
                digest=root.digest,
                media_type=root.media_type,
                platforms=resolved.platforms,
                packages=packages,
                unscanned_layers=unscanned,
            )
        )

    for chart in plan.charts:
        store(chart.config)
        chart_digest = store(chart.archive)
        manifest_bytes = chart.manifest()
        digest = store(manifest_bytes)
        add(
            Artifact(
                kind="chart",
                name=chart.name,
                version=chart.version,
                ref=chart.ref,
                media_type=media_types.OCI_MANIFEST,
                digest=digest,
                size=len(manifest_bytes),
            ),
            Descriptor(media_types.OCI_MANIFEST, digest, len(manifest_bytes)),
        )
        sbom_charts.append(
            SbomChart(
                name=chart.name, version=chart.version, digest=chart_digest, images=chart.images
            )
        )

    task_digests = {id(task): copier.digests[n] for n, task in enumerate(plan.tasks)}
    by_data_name = {task.data_name: task_digests[id(task)] for task in plan.tasks if task.data_name}
    for name, version, files in plan.models:
        digests = {
            f.relative_path: by_data_name[layout.model_data_name(name, version, f.relative_path)]
            for f in files
        }
        model = build_model_artifact(name, version, files, digests)
        if options.signer is not None:
            # The layer digests are the files' sha256: signing needs no second read of weights.
            statement = ModelManifest.build(model_subject(name, version), digests).statement()
            signatures.append(
                (
                    layout.model_signature_name(name, version, options.signer_name),
                    options.signer.sign_statement(statement).to_json(),
                )
            )
        store(model.config)
        digest = store(model.manifest)
        add(
            Artifact(
                kind="model",
                name=name,
                version=version,
                ref=f"models/{name}:{version}",
                media_type=media_types.OCI_MANIFEST,
                digest=digest,
                size=len(model.manifest),
            ),
            Descriptor(
                media_types.OCI_MANIFEST,
                digest,
                len(model.manifest),
                artifact_type=media_types.MODEL_ARTIFACT,
            ),
        )
        sbom_models.append(
            SbomModel(
                name=name,
                version=version,
                digest=digest,
                files=tuple(
                    SbomModelFile(
                        f.relative_path, digests[f.relative_path].removeprefix("sha256:"), f.size
                    )
                    for f in files
                ),
            )
        )

    store(b"{}")
    for extra in spec.files:
        digest = by_data_name[layout.file_data_name(extra.name)]
        size = extra.path.stat().st_size
        layer = Descriptor(
            media_types.FILE_LAYER,
            digest,
            size,
            annotations=((media_types.TITLE_ANNOTATION, extra.name),),
        )
        manifest_bytes = artifact_manifest(artifact_type=media_types.FILE_ARTIFACT, layers=[layer])
        manifest_digest = store(manifest_bytes)
        add(
            Artifact(
                kind="file",
                name=extra.name,
                ref=f"sealift/files:{extra.name}",
                media_type=media_types.OCI_MANIFEST,
                digest=manifest_digest,
                size=len(manifest_bytes),
            ),
            Descriptor(
                media_types.OCI_MANIFEST,
                manifest_digest,
                len(manifest_bytes),
                artifact_type=media_types.FILE_ARTIFACT,
            ),
        )
        sbom_files.append(SbomFile(path=extra.name, digest=digest, size=size))

    sbom = build_sbom(
        SbomBundle(
            name=spec.metadata.name, version=spec.metadata.version, vendor=spec.metadata.vendor
        ),
        sbom_images,
        sbom_charts,
        sbom_models,
        sbom_files,
        tool_version=__version__,
    )
    sbom_digest = store(sbom)
    sbom_layer = Descriptor(
        media_types.SBOM_LAYER,
        sbom_digest,
        len(sbom),
        annotations=((media_types.TITLE_ANNOTATION, "sbom.cdx.json"),),
    )
    sbom_manifest = artifact_manifest(artifact_type=media_types.SBOM_ARTIFACT, layers=[sbom_layer])
    sbom_manifest_digest = store(sbom_manifest)
    add(
        Artifact(
            kind="sbom",
            name="sbom",
            ref=f"sealift/sbom:{spec.metadata.version}",
            media_type=media_types.OCI_MANIFEST,
            digest=sbom_manifest_digest,
            size=len(sbom_manifest),
        ),
        Descriptor(
            media_types.OCI_MANIFEST,
            sbom_manifest_digest,
            len(sbom_manifest),
            artifact_type=media_types.SBOM_ARTIFACT,
        ),
    )

    index = canonical_json(
        {
            "schemaVersion": 2,
            "mediaType": media_types.OCI_INDEX,
            "manifests": [entry.to_dict() for entry in index_entries],
        }
    )
    blob_sizes = dict(stored)
    for number, task in enumerate(plan.tasks):
        blob_sizes[copier.digests[number]] = task.size
    manifest = BundleManifest(
        name=spec.metadata.name,
        version=spec.metadata.version,
        vendor=spec.metadata.vendor,
        description=spec.metadata.description,
        tool_version=__version__,
        artifacts=tuple(artifacts),
        blob_count=len(blob_sizes),
        total_bytes=sum(blob_sizes.values()),
    )
    if options.signer is not None:
        statement = bundle_statement(manifest.name, manifest.version, manifest.digest)
        signatures.append(
            (
                layout.bundle_signature_name(options.signer_name),
                options.signer.sign_statement(statement).to_json(),
            )
        )
    files = [
        (layout.OCI_LAYOUT_FILE, layout.OCI_LAYOUT_CONTENT),
        (layout.INDEX_FILE, index),
        *signatures,
        (layout.BUNDLE_MANIFEST_FILE, manifest.to_json()),
    ]
    return manifest, files


__all__ = ["CreateOptions", "CreateResult", "create_bundle"]
