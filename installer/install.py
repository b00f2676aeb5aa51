"""``sealift install`` (mirror and weight store): verify cheaply, then move every byte once.

Order: the signatures the trust policy requires and the whole descriptor graph (small reads
only); preflight of the registry and the bucket; then blobs hashed while they stream to the
registry and the store, tags and model manifests last. With a site file, the cluster side
follows (installer/cluster_install.py): GPU Operator, prefetch DaemonSet, vLLM.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sealift.audit_log import AuditLog
from sealift.bundles.blob_source import open_bundle
from sealift.bundles.verify import verify_bundle
from sealift.docker_auth import Credentials, load_credentials
from sealift.errors import InputError, IntegrityError, RemoteError
from sealift.installer.cluster_install import (
    ClusterOptions,
    ClusterResult,
    prepare_cluster_side,
    run_cluster_side,
)
from sealift.installer.mirror import MirrorResult, MirrorTarget, plan_mirror, push_mirror
from sealift.installer.object_store import (
    StoreResult,
    StoreTarget,
    make_client,
    preflight,
    publish_model_manifests,
    upload_models,
)
from sealift.progress import Progress
from sealift.registry_client import RegistryClient
from sealift.signing.trust_policy import TrustPolicy


@dataclass(frozen=True)
class InstallOptions:
    """Where to install and how."""

    registry: MirrorTarget | None = None
    store: StoreTarget | None = None
    plain_http: bool = False
    ca_file: str | None = None
    auth_file: Path | None = None
    credentials: Credentials | None = None
    jobs: int = 4
    tag_policy: str = "overwrite"
    push_models: bool = False
    policy: TrustPolicy | None = None
    allow_rollback: bool = False
    audit_log: Path | None = None
    chunk_size: int = 256 * 1024 * 1024
    cluster: ClusterOptions | None = None


@dataclass(frozen=True)
class InstallResult:
    """What install did, for the summary."""

    name: str
    version: str
    manifest_digest: str
    trust: tuple[str, ...]
    mirror: MirrorResult | None
    store: StoreResult | None
    audit: tuple[dict[str, Any], ...]
    cluster: ClusterResult | None = None


def install(bundle: Path, options: InstallOptions, progress: Progress) -> InstallResult:
    """Load the mirror and the store from ``bundle``; nothing unverified becomes visible."""
    audit = AuditLog(options.audit_log)
    try:
        with open_bundle(bundle) as source:
            report = verify_bundle(
                source,
                jobs=options.jobs,
                progress=progress,
                policy=options.policy,
                allow_rollback=options.allow_rollback,
                hash_blobs=False,
            )
            if not report.ok:
                first = report.problems[0]
                raise IntegrityError(
                    f"{bundle}: {first.one_line()}"
                    + (
                        f" (and {len(report.problems) - 1} more)"
                        if len(report.problems) > 1
                        else ""
                    ),
                    hint="run sealift bundle verify for the full list; nothing was installed",
                )
            manifest = report.manifest
            assert manifest is not None
            audit.record(
                "install-start",
                bundle=str(bundle),
                name=manifest.name,
                version=manifest.version,
                manifestDigest=report.manifest_digest,
                trust=list(report.trust),
            )
            prepared = None
            if options.cluster is not None:
                if options.registry is None or options.store is None:
                    raise InputError(
                        "--site needs --registry and --weights",
                        hint="the cluster runs images from the mirror and weights from the store",
                    )
                # Every object is planned and checked before a single byte moves.
                prepared = prepare_cluster_side(
                    source, manifest, options.cluster, mirror=options.registry, store=options.store
                )
            client = None
            if options.registry is not None:
                credentials = options.credentials or load_credentials(
                    options.registry.registry, auth_file=options.auth_file
                )
                client = RegistryClient(
                    options.registry.registry,
                    plain_http=options.plain_http,
                    ca_file=options.ca_file,
                    credentials=credentials,
                    connections=options.jobs + 2,
                    chunk_size=options.chunk_size,
                    on_retry=lambda text: progress.note(text, level="warning"),
                )
                client.ping()
            s3 = None
            checksums = False
            if options.store is not None:
                s3 = make_client(options.store, jobs=options.jobs)
                checksums = preflight(s3, options.store)
            stored: list[StoreResult] = []

            def upload_weights() -> None:
                # Every object is verified before any tag or model manifest is published.
                if s3 is not None:
                    assert options.store is not None
                    stored.append(
                        upload_models(
                            source,
                            manifest,
                            s3,
                            options.store,
                            jobs=options.jobs,
                            progress=progress,
                            audit=audit,
                            checksums=checksums,
                        )
                    )

            mirror = None
            if client is not None:
                assert options.registry is not None
                plans = plan_mirror(source, manifest, options.registry, models=options.push_models)
                mirror = push_mirror(
                    source,
                    plans,
                    client,
                    jobs=options.jobs,
                    tag_policy=options.tag_policy,
                    progress=progress,
                    audit=audit,
                    before_tags=upload_weights,
                )
            else:
                upload_weights()
            if s3 is not None:
                assert options.store is not None
                publish_model_manifests(source, manifest, s3, options.store, audit=audit)
            cluster_result = None
            if prepared is not None:
                cluster_result = run_cluster_side(
                    prepared, registry=client, progress=progress, audit=audit
                )
            audit.record("install-done", name=manifest.name, version=manifest.version)
            return InstallResult(
                name=manifest.name,
                version=manifest.version,
                manifest_digest=report.manifest_digest,
                trust=report.trust,
                mirror=mirror,
                store=stored[0] if stored else None,
                audit=tuple(audit.records),
                cluster=cluster_result,
            )
    except RemoteError:
        audit.record("install-failed")
        raise
    finally:
        audit.close()
