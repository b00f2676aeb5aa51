"""The command line: parse, call the library, print. No behaviour lives here.

Settings follow one precedence, flag > environment > default, and invalid values are refused,
never clamped. Every :class:`SealiftError` is printed as one line with its hint, and its family
picks the exit code (2 input, 3 integrity, 4 remote, 5 local resources). With ``--json`` the
result, or the error, is one JSON document on stdout; progress goes to stderr either way.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from sealift import __version__
from sealift.errors import InputError, SealiftError
from sealift.progress import Progress
from sealift.units import parse_duration, parse_size

F = TypeVar("F", bound=Callable[..., Any])
EXIT_INTERRUPTED = 130


def _emit_json(document: Any) -> None:
    click.echo(json.dumps(document, indent=2, sort_keys=True))


def output_options(function: F) -> F:
    """``--json`` and ``--quiet`` on a command, and the error handling every command shares."""

    @click.option("--json", "json_output", is_flag=True, help="Print the result as JSON.")
    @click.option("--quiet", "-q", is_flag=True, help="No progress, only the result and errors.")
    @functools.wraps(function)
    def wrapper(*args: Any, json_output: bool, quiet: bool, **kwargs: Any) -> Any:
        progress = Progress.for_cli(json_output=json_output, quiet=quiet)
        try:
            return function(*args, progress=progress, json_output=json_output, **kwargs)
        except SealiftError as error:
            if json_output:
                _emit_json(
                    {
                        "error": {
                            "family": error.family,
                            "message": error.message,
                            "hint": error.hint,
                        }
                    }
                )
            click.echo(f"error: {error.one_line()}", err=True)
            sys.exit(error.exit_code)
        except KeyboardInterrupt:
            click.echo(
                "interrupted: nothing incomplete was published; run again to resume", err=True
            )
            sys.exit(EXIT_INTERRUPTED)
        except (click.exceptions.Exit, click.ClickException, SystemExit):
            raise
        except Exception as error:  # the last line of defence for a clear message
            if os.environ.get("SEALIFT_DEBUG"):
                traceback.print_exc()
            click.echo(
                f"error: internal error {type(error).__name__}: {error}"
                " (hint: re-run with SEALIFT_DEBUG=1 and report the traceback)",
                err=True,
            )
            sys.exit(1)

    return wrapper  # type: ignore[return-value]


class SizeType(click.ParamType):
    """A byte size such as 25GiB."""

    name = "size"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_size(str(value), what=f"--{param.name if param else 'size'}")
        except SealiftError as bad:
            self.fail(bad.one_line(), param, ctx)


class DurationType(click.ParamType):
    """A duration such as 90s, 15m or 2h."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_duration(str(value), what=f"--{param.name if param else 'duration'}")
        except SealiftError as bad:
            self.fail(bad.one_line(), param, ctx)


def cluster_options(function: F) -> F:
    """Where the cluster is and how to render the GPU Operator chart."""
    options = [
        click.option(
            "--site",
            "site_file",
            type=click.Path(path_type=Path, dir_okay=False),
            help="The site file: GPU node pools, driver strategy and how each model is served.",
        ),
        click.option(
            "--helm",
            type=click.Path(path_type=Path, dir_okay=False),
            envvar="SEALIFT_HELM",
            help="The helm binary that renders the GPU Operator chart (env SEALIFT_HELM).",
        ),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def _store_target(
    weights_url: str | None,
    s3_endpoint: str | None,
    s3_region: str | None,
    s3_path_style: bool,
    s3_ca_file: Path | None,
) -> Any:
    from sealift.installer.object_store import parse_store_url

    if weights_url is None:
        return None
    return parse_store_url(
        weights_url,
        endpoint=s3_endpoint,
        region=s3_region,
        path_style=s3_path_style,
        ca_file=str(s3_ca_file) if s3_ca_file else None,
    )


JOBS = click.option(
    "--jobs",
    "-j",
    type=click.IntRange(1, 64),
    default=4,
    show_default=True,
    envvar="SEALIFT_JOBS",
    help="Blobs moved or hashed in parallel (env SEALIFT_JOBS).",
)


class _OneLineErrors(click.Group):
    """Usage errors as one ``error: ... (hint: ...)`` line, like every other sealift error."""

    def main(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        kwargs["standalone_mode"] = False
        try:
            result = super().main(*args, **kwargs)
        except click.exceptions.Abort:
            click.echo("interrupted", err=True)
            sys.exit(EXIT_INTERRUPTED)
        except click.ClickException as error:
            command = error.ctx.command_path if getattr(error, "ctx", None) else "sealift"  # type: ignore[attr-defined]
            message = " ".join(error.format_message().split())
            click.echo(f"error: {message} (hint: see '{command} --help')", err=True)
            sys.exit(error.exit_code)
        sys.exit(result if isinstance(result, int) else 0)


@click.group(
    cls=_OneLineErrors,
    context_settings={"help_option_names": ["-h", "--help"], "show_default": True},
)
@click.version_option(__version__, prog_name="sealift")
def main() -> None:
    """sealift: carry a complete LLM serving stack into an air-gapped Kubernetes cluster."""


def signing_options(prefix: str) -> Callable[[F], F]:
    """Options that name a signer: a key file (with a certificate) or a PKCS#11 token."""

    def decorate(function: F) -> F:
        options = [
            click.option(
                f"--{prefix}key",
                "key",
                type=click.Path(path_type=Path, dir_okay=False),
                help="EC private key (PEM, P-256 or P-384); passphrase from SEALIFT_KEY_PASSWORD.",
            ),
            click.option(
                f"--{prefix}cert",
                "cert",
                type=click.Path(path_type=Path, dir_okay=False),
                help="The key's X.509 certificate, from your PKI.",
            ),
            click.option(
                f"--{prefix}chain",
                "chain",
                type=click.Path(path_type=Path, dir_okay=False),
                help="Intermediate certificates (PEM) up to, not including, the root.",
            ),
            click.option(
                "--key-password-file",
                type=click.Path(path_type=Path, dir_okay=False),
                help="File holding the key's passphrase (instead of SEALIFT_KEY_PASSWORD).",
            ),
            click.option(
                f"--{prefix}pkcs11-uri",
                "pkcs11_uri",
                metavar="URI",
                help="A key in a PKCS#11 token (RFC 7512 URI with module-path and pin-source).",
            ),
        ]
        for option in reversed(options):
            function = option(function)
        return function

    return decorate


def trust_options(function: F) -> F:
    """``--policy FILE`` or its shorthand ``--trust KEY.pub``."""
    function = click.option(
        "--trust",
        "trust_key",
        type=click.Path(path_type=Path, dir_okay=False),
        help="Shorthand for a policy that requires this EC public key (PEM).",
    )(function)
    return click.option(
        "--policy",
        type=click.Path(path_type=Path, dir_okay=False),
        envvar="SEALIFT_POLICY",
        help="Trust policy file (env SEALIFT_POLICY).",
    )(function)


def _policy(policy: Path | None, trust_key: Path | None, *, required: bool) -> Any:
    from sealift.signing.trust_policy import load_trust_policy, policy_for_key

    if policy is not None and trust_key is not None:
        raise InputError("--policy and --trust cannot be used together", hint="choose one")
    if policy is not None:
        return load_trust_policy(policy)
    if trust_key is not None:
        return policy_for_key(trust_key)
    if required:
        raise InputError("no trust policy given", hint="pass --policy FILE or --trust KEY.pub")
    return None


def _signer(
    key: Path | None,
    cert: Path | None,
    chain: Path | None,
    key_password_file: Path | None,
    pkcs11_uri: str | None,
) -> Any:
    from sealift.signing.signers import load_signer

    return load_signer(
        key=key,
        certificate=cert,
        chain=chain,
        password_file=key_password_file,
        pkcs11_uri=pkcs11_uri,
    )


SIGNER_NAME = click.option(
    "--signer-name",
    default=None,
    metavar="NAME",
    help="Name of the signature files (signatures/.../NAME.sig).",
)


@main.group()
def bundle() -> None:
    """Build, verify and inspect offline bundles."""


@bundle.command("create")
@click.option(
    "--file",
    "-f",
    "bundle_file",
    type=click.Path(path_type=Path, dir_okay=False),
    required=True,
    help="The bundle file (sealift.yaml).",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(path_type=Path),
    required=True,
    help="A folder, or NAME.tar for a tar stream.",
)
@click.option("--split", type=SizeType(), help="Cut the tar into parts of at most SIZE (25GiB).")
@click.option(
    "--tmpdir",
    type=click.Path(path_type=Path, file_okay=False),
    envvar="SEALIFT_TMPDIR",
    help="Where partial blobs are written; same filesystem as -o (env SEALIFT_TMPDIR).",
)
@JOBS
@click.option(
    "--plain-http",
    "plain_http",
    multiple=True,
    metavar="HOST[:PORT]",
    help="Talk plain http to this registry (repeatable). TLS is used otherwise.",
)
@click.option(
    "--ca-file",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    envvar="SEALIFT_CA_FILE",
    help="CA bundle for registry TLS (env SEALIFT_CA_FILE).",
)
@click.option(
    "--authfile",
    type=click.Path(path_type=Path, dir_okay=False),
    help="docker config.json / auth.json with registry credentials (default: the usual places).",
)
@signing_options("sign-")
@SIGNER_NAME
@output_options
def bundle_create(
    bundle_file: Path,
    output: Path,
    split: int | None,
    tmpdir: Path | None,
    jobs: int,
    plain_http: tuple[str, ...],
    ca_file: Path | None,
    authfile: Path | None,
    key: Path | None,
    cert: Path | None,
    chain: Path | None,
    key_password_file: Path | None,
    pkcs11_uri: str | None,
    signer_name: str | None,
    progress: Progress,
    json_output: bool,
) -> None:
    """Package images, charts, models and files into one offline bundle.

    With --sign-key (or --sign-pkcs11-uri) every model and the bundle manifest are signed, in
    the OpenSSF model-signing format, as SIGNER_NAME (default: vendor).
    """
    from sealift.bundles.bundle_file import load_bundle_file
    from sealift.bundles.create import CreateOptions, create_bundle

    spec = load_bundle_file(bundle_file)
    signer = None
    if key is not None or pkcs11_uri is not None:
        signer = _signer(key, cert, chain, key_password_file, pkcs11_uri)
    elif cert is not None or chain is not None:
        raise InputError("--sign-cert needs --sign-key", hint="pass the certificate's key")
    if split is not None and output.suffix != ".tar":
        raise InputError(
            f"--split needs a tar output, not {output}", hint="name the output NAME.tar"
        )
    result = create_bundle(
        spec,
        CreateOptions(
            output=output,
            split=split,
            tmpdir=tmpdir,
            jobs=jobs,
            plain_http=frozenset(plain_http),
            ca_file=str(ca_file) if ca_file else None,
            auth_file=authfile,
            signer=signer,
            signer_name=signer_name or "vendor",
        ),
        progress,
    )
    manifest = result.manifest
    if json_output:
        _emit_json(
            {
                "name": manifest.name,
                "version": manifest.version,
                "bundleManifestDigest": manifest.digest,
                "artifacts": [a.to_dict() for a in manifest.artifacts],
                "totals": {"blobs": manifest.blob_count, "bytes": manifest.total_bytes},
                "paths": list(result.paths),
                "bytesCopied": result.bytes_copied,
                "bytesReused": result.bytes_reused,
                "warnings": list(result.warnings),
            }
        )
        return
    for path in result.paths:
        click.echo(f"wrote {path}")
    click.echo(
        f"created {manifest.name} {manifest.version}: {len(manifest.artifacts)} artifacts,"
        f" {manifest.blob_count} blobs, {manifest.total_bytes} bytes"
        f" ({result.bytes_reused} reused); bundle manifest {manifest.digest}"
    )


@bundle.command("verify")
@click.argument("bundle_path", metavar="BUNDLE", type=click.Path(path_type=Path))
@JOBS
@click.option("--parts", is_flag=True, help="Also check each part's sha256 against the index.")
@trust_options
@click.option(
    "--allow-rollback",
    is_flag=True,
    help="Accept a release older than the policy's minimum (logged as a warning).",
)
@output_options
def bundle_verify(
    bundle_path: Path,
    jobs: int,
    parts: bool,
    policy: Path | None,
    trust_key: Path | None,
    allow_rollback: bool,
    progress: Progress,
    json_output: bool,
) -> None:
    """Re-hash every blob and check the whole bundle; exit 3 on any problem.

    With --policy (or --trust) the signatures over the bundle manifest and every model are
    checked too, and a release older than the policy's minimum is refused.
    """
    from sealift.bundles.blob_source import open_bundle
    from sealift.bundles.verify import verify_bundle

    trust = _policy(policy, trust_key, required=False)
    with open_bundle(bundle_path) as source:
        report = verify_bundle(
            source,
            jobs=jobs,
            progress=progress,
            parts=parts,
            policy=trust,
            allow_rollback=allow_rollback,
        )
    if json_output:
        _emit_json(report.to_dict())
    else:
        for problem in report.problems:
            click.echo(problem.one_line())
        for line in report.trust[1:]:
            click.echo(line)
        click.echo(report.summary())
    if not report.ok:
        sys.exit(3)


@bundle.command("inspect")
@click.argument("bundle_path", metavar="BUNDLE", type=click.Path(path_type=Path))
@output_options
def bundle_inspect(bundle_path: Path, progress: Progress, json_output: bool) -> None:
    """Show what a bundle holds (without re-hashing it)."""
    from sealift.bundles.blob_source import open_bundle
    from sealift.bundles.inspect import inspect_bundle

    with open_bundle(bundle_path) as source:
        report = inspect_bundle(source)
    if json_output:
        _emit_json(report.to_dict())
    else:
        for line in report.lines():
            click.echo(line)


@main.command("install")
@click.argument("bundle_path", metavar="BUNDLE", type=click.Path(path_type=Path))
@click.option("--registry", metavar="HOST[:PORT][/PREFIX]", help="The registry mirror to load.")
@click.option("--insecure", is_flag=True, help="Plain http to the mirror (TLS otherwise).")
@click.option(
    "--ca-file",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    envvar="SEALIFT_CA_FILE",
    help="CA bundle for the mirror's TLS (env SEALIFT_CA_FILE).",
)
@click.option(
    "--authfile",
    type=click.Path(path_type=Path, dir_okay=False),
    help="docker config.json / auth.json with the mirror's credentials.",
)
@click.option("--username", help="Mirror user; the password is read from stdin (--password-stdin).")
@click.option("--password-stdin", is_flag=True, help="Read the mirror password from stdin.")
@click.option("--weights", "weights_url", metavar="s3://BUCKET/PREFIX", help="The weight store.")
@click.option(
    "--s3-endpoint", metavar="URL", envvar="AWS_ENDPOINT_URL", help="S3-compatible endpoint."
)
@click.option("--s3-region", metavar="REGION", envvar="AWS_REGION", help="S3 region.")
@click.option("--s3-path-style", is_flag=True, help="Path-style bucket addressing (MinIO, Ceph).")
@click.option(
    "--s3-ca-file",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="CA bundle for the store's TLS.",
)
@trust_options
@click.option(
    "--allow-rollback", is_flag=True, help="Accept a release older than the policy's minimum."
)
@click.option(
    "--existing-tags",
    type=click.Choice(["skip", "overwrite", "error"]),
    default="error",
    help="What to do with a mirror tag that points at another digest.",
)
@click.option("--push-models", is_flag=True, help="Also push the model artifacts to the mirror.")
@click.option(
    "--chunk-size",
    type=SizeType(),
    default="256MiB",
    help="Blobs larger than this are uploaded in PATCH chunks of this size.",
)
@click.option(
    "--audit-log",
    type=click.Path(path_type=Path, dir_okay=False),
    default=Path("sealift-audit.jsonl"),
    help="JSON-lines record of everything pushed, skipped or uploaded (appended).",
)
@click.option("--no-cluster", is_flag=True, help="Load the mirror and the store only.")
@cluster_options
@click.option(
    "--kubeconfig",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="The cluster's kubeconfig (default: KUBECONFIG, then ~/.kube/config).",
)
@click.option("--context", help="The kubeconfig context to use (default: its current context).")
@click.option("--operator-timeout", type=DurationType(), help="Overrides timeouts.operator.")
@click.option("--prefetch-timeout", type=DurationType(), help="Overrides timeouts.prefetch.")
@click.option("--rollout-timeout", type=DurationType(), help="Overrides timeouts.rollout.")
@JOBS
@output_options
def install_command(
    bundle_path: Path,
    registry: str | None,
    insecure: bool,
    ca_file: Path | None,
    authfile: Path | None,
    username: str | None,
    password_stdin: bool,
    weights_url: str | None,
    s3_endpoint: str | None,
    s3_region: str | None,
    s3_path_style: bool,
    s3_ca_file: Path | None,
    policy: Path | None,
    trust_key: Path | None,
    allow_rollback: bool,
    existing_tags: str,
    push_models: bool,
    chunk_size: int,
    audit_log: Path,
    no_cluster: bool,
    site_file: Path | None,
    helm: Path | None,
    kubeconfig: Path | None,
    context: str | None,
    operator_timeout: int | None,
    prefetch_timeout: int | None,
    rollout_timeout: int | None,
    jobs: int,
    progress: Progress,
    json_output: bool,
) -> None:
    """Verify a bundle, load the registry mirror and the weight store, and bring up the cluster.

    Signatures and the descriptor graph are checked first; then every blob is hashed while it
    streams to the mirror or the store. Tags and model manifests are written last. Re-running
    after an interruption moves only what is missing. With --site, every cluster object is
    planned and checked before a byte moves; then the GPU Operator, the prefetch DaemonSets and
    vLLM are applied in that order, each waited for until it really serves.
    """
    from sealift.docker_auth import Credentials
    from sealift.installer.cluster_install import ClusterOptions
    from sealift.installer.install import InstallOptions, install
    from sealift.installer.mirror import parse_mirror_target
    from sealift.installer.site_file import load_site

    if registry is None and weights_url is None:
        raise InputError("nothing to install into", hint="pass --registry and/or --weights")
    credentials = None
    if username is not None or password_stdin:
        if not (username and password_stdin):
            raise InputError(
                "--username needs --password-stdin", hint='echo "$PASSWORD" | sealift install ...'
            )
        password = sys.stdin.readline().rstrip("\r\n")
        if not password:
            raise InputError("no password on stdin", hint="pipe the password into sealift")
        credentials = Credentials(username=username, password=password)
    trust = _policy(policy, trust_key, required=False)
    if trust is None:
        progress.note("no --policy or --trust: signatures are not checked", level="warning")
    cluster = None
    if site_file is not None and not no_cluster:
        if policy is None:
            raise InputError(
                "--site needs --policy FILE",
                hint="prefetch agents verify weights against a policy file; --trust is not enough",
            )
        timeouts = {"operator": operator_timeout, "prefetch": prefetch_timeout,
                    "rollout": rollout_timeout}  # fmt: skip
        cluster = ClusterOptions(
            site=load_site(site_file),
            policy_file=policy,
            kubeconfig=kubeconfig,
            context=context,
            helm=helm,
            timeouts={k: v for k, v in timeouts.items() if v is not None},
        )
    result = install(
        bundle_path,
        InstallOptions(
            registry=parse_mirror_target(registry) if registry else None,
            store=_store_target(weights_url, s3_endpoint, s3_region, s3_path_style, s3_ca_file),
            plain_http=insecure,
            ca_file=str(ca_file) if ca_file else None,
            auth_file=authfile,
            credentials=credentials,
            jobs=jobs,
            tag_policy=existing_tags,
            push_models=push_models,
            policy=trust,
            allow_rollback=allow_rollback,
            audit_log=audit_log,
            chunk_size=chunk_size,
            cluster=cluster,
        ),
        progress,
    )
    mirror, store, applied = result.mirror, result.store, result.cluster
    if json_output:
        _emit_json(
            {
                "name": result.name,
                "version": result.version,
                "bundleManifestDigest": result.manifest_digest,
                "trust": list(result.trust),
                "mirror": mirror.__dict__ if mirror else None,
                "store": store.__dict__ if store else None,
                "cluster": {
                    "objectsApplied": len(applied.applied),
                    "objectsChanged": applied.changed,
                    "upgraded": list(applied.upgraded),
                    "removed": list(applied.pruned),
                    "waits": [
                        {"what": w.what, "seconds": round(w.seconds, 1)} for w in applied.waits
                    ],
                }
                if applied
                else None,
                "auditLog": str(audit_log),
            }
        )
        return
    for line in result.trust[1:]:
        click.echo(line)
    if mirror is not None:
        click.echo(
            f"mirror: {mirror.tags_written} tags written, {mirror.tags_unchanged} unchanged;"
            f" blobs {mirror.blobs_uploaded} uploaded ({mirror.bytes_uploaded} bytes),"
            f" {mirror.blobs_mounted} mounted, {mirror.blobs_present} already there"
        )
    if store is not None:
        click.echo(
            f"weights: {store.uploaded} objects uploaded ({store.bytes_uploaded} bytes),"
            f" {store.present} already there, for {store.models} model(s)"
        )
    if applied is not None:
        upgraded = f"; upgraded {', '.join(applied.upgraded)}" if applied.upgraded else ""
        if applied.pruned:
            upgraded += f"; removed {len(applied.pruned)} objects the site file no longer names"
        click.echo(
            f"cluster: {len(applied.applied)} objects applied, {applied.changed} changed"
            f"{upgraded}; {len(applied.waits)} waits, {sum(w.seconds for w in applied.waits):.0f}s;"
            " vLLM serving"
        )
    click.echo(
        f"installed {result.name} {result.version} (bundle manifest {result.manifest_digest});"
        f" audit log {audit_log}"
    )


@main.command("render")
@click.argument("bundle_path", metavar="BUNDLE", type=click.Path(path_type=Path))
@click.option("--registry", required=True, metavar="HOST[:PORT][/PREFIX]", help="The mirror.")
@click.option("--weights", "weights_url", required=True, metavar="s3://BUCKET/PREFIX",
              help="The weight store the prefetch agents read.")  # fmt: skip
@click.option("--s3-endpoint", metavar="URL", help="S3-compatible endpoint.")
@click.option("--s3-region", metavar="REGION", help="S3 region.")
@click.option("--s3-path-style", is_flag=True, help="Path-style bucket addressing.")
@click.option(
    "--policy",
    required=True,
    type=click.Path(path_type=Path, dir_okay=False),
    envvar="SEALIFT_POLICY",
    help="The trust policy the agents verify weights against (and the bundle is checked with).",
)
@click.option(
    "--allow-rollback", is_flag=True, help="Accept a release older than the policy's minimum."
)
@cluster_options
@click.option("--kube-version", metavar="X.Y.Z", help="Render for this Kubernetes version.")
@click.option(
    "-o",
    "--output",
    "out_dir",
    required=True,
    type=click.Path(path_type=Path, file_okay=False),
    help="Folder for the manifests (10-gpu-operator, 20-prefetch, 30-serving, kustomization).",
)
@output_options
def render_command(
    bundle_path: Path,
    registry: str,
    weights_url: str,
    s3_endpoint: str | None,
    s3_region: str | None,
    s3_path_style: bool,
    policy: Path,
    allow_rollback: bool,
    site_file: Path | None,
    helm: Path | None,
    kube_version: str | None,
    out_dir: Path,
    progress: Progress,
    json_output: bool,
) -> None:
    """Write the cluster objects install would apply, for GitOps, after the same checks.

    The bundle's signatures are verified, every object is validated offline and no image may
    come from outside the mirror. No secret value is rendered: Secrets are referenced by name.
    """
    from sealift.installer.cluster_install import render_bundle
    from sealift.installer.mirror import parse_mirror_target
    from sealift.installer.site_file import load_site

    if site_file is None:
        raise InputError("render needs --site", hint="the site file describes the cluster")
    plan, written = render_bundle(
        bundle_path,
        site=load_site(site_file),
        mirror=parse_mirror_target(registry),
        store=_store_target(weights_url, s3_endpoint, s3_region, s3_path_style, None),
        policy_file=policy,
        helm=helm,
        kube_version=kube_version,
        out_dir=out_dir,
        progress=progress,
        allow_rollback=allow_rollback,
    )
    objects = sum(len(group) for group in plan.groups())
    if json_output:
        _emit_json(
            {
                "files": [str(path) for path in written],
                "objects": objects,
                "imagesChecked": plan.checked_images,
            }
        )
        return
    click.echo(
        f"rendered {objects} objects into {out_dir} ({plan.checked_images} image references,"
        " all from the mirror)"
    )


@main.command("prefetch")
@click.option(
    "--source",
    required=True,
    metavar="s3://BUCKET/PREFIX/NAME/VERSION | oci://HOST/REPO:VERSION",
    envvar="SEALIFT_PREFETCH_SOURCE",
    help="The model version in the weight store or a registry (env SEALIFT_PREFETCH_SOURCE).",
)
@click.option("--insecure", is_flag=True, help="Plain http to an oci:// registry source.")
@click.option(
    "--ca-file",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    envvar="SEALIFT_CA_FILE",
    help="CA bundle for an oci:// registry source.",
)
@click.option(
    "--authfile",
    type=click.Path(path_type=Path, dir_okay=False),
    help="docker config.json / auth.json for an oci:// registry source.",
)
@click.option(
    "--dest",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("/opt/models"),
    envvar="SEALIFT_PREFETCH_DEST",
    help="The node's model store (env SEALIFT_PREFETCH_DEST).",
)
@click.option(
    "--s3-endpoint", metavar="URL", envvar="AWS_ENDPOINT_URL", help="S3-compatible endpoint."
)
@click.option("--s3-region", metavar="REGION", envvar="AWS_REGION", help="S3 region.")
@click.option(
    "--s3-path-style", is_flag=True, envvar="SEALIFT_S3_PATH_STYLE", help="Path-style addressing."
)
@click.option(
    "--s3-ca-file",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="CA bundle for the store's TLS.",
)
@trust_options
@click.option(
    "--keep",
    type=click.IntRange(1, 100),
    default=2,
    help="Complete versions of the model kept on the node (the current one included).",
)
@click.option(
    "--serve",
    metavar="HOST:PORT",
    help="Serve /livez, /readyz and /metrics, and keep running once the copy is in place.",
)
@click.option(
    "--label-node",
    is_flag=True,
    help="Label this node (NODE_NAME) with each complete version, for pods to require.",
)
@JOBS
@output_options
def prefetch_command(
    source: str,
    insecure: bool,
    ca_file: Path | None,
    authfile: Path | None,
    dest: Path,
    s3_endpoint: str | None,
    s3_region: str | None,
    s3_path_style: bool,
    s3_ca_file: Path | None,
    policy: Path | None,
    trust_key: Path | None,
    keep: int,
    serve: str | None,
    label_node: bool,
    jobs: int,
    progress: Progress,
    json_output: bool,
) -> None:
    """Fetch one model version to this node's local disk, verified against the trust policy.

    Signatures are checked before a byte of weights moves; files are hashed while they stream
    and appear under DEST/NAME/DIGEST (with DEST/NAME/current pointing at it) only when all of
    them are verified. Killed at any point, a re-run resumes where it stopped.
    """
    import signal
    import threading

    from sealift.installer.object_store import make_client, parse_store_url
    from sealift.prefetch.agent import PrefetchMetrics, prefetch
    from sealift.prefetch.health_server import HealthServer
    from sealift.prefetch.s3_source import S3ModelSource

    trust = _policy(policy, trust_key, required=True)
    node = None
    if label_node:
        from sealift.prefetch.node_label import node_name_from_env

        node = node_name_from_env()  # before any download: a missing NODE_NAME fails fast
    model_source: Any
    if source.startswith("oci://"):
        from sealift.docker_auth import load_credentials
        from sealift.prefetch.oci_source import OciModelSource, parse_oci_source
        from sealift.registry_client import RegistryClient

        reference = parse_oci_source(source)
        client = RegistryClient(
            reference.registry,
            plain_http=insecure,
            ca_file=str(ca_file) if ca_file else None,
            credentials=load_credentials(reference.registry, auth_file=authfile),
            connections=jobs + 2,
        )
        model_source = OciModelSource(client, reference)
    else:
        target = parse_store_url(
            source,
            endpoint=s3_endpoint,
            region=s3_region,
            path_style=s3_path_style,
            ca_file=str(s3_ca_file) if s3_ca_file else None,
        )
        model_source = S3ModelSource(make_client(target, jobs=jobs), target)
    metrics = PrefetchMetrics()
    server = HealthServer(serve, metrics).start() if serve else None
    result = prefetch(
        model_source,
        dest,
        trust,
        jobs=jobs,
        keep=keep,
        progress=progress,
        metrics=metrics,
    )
    labels: dict[str, str] = {}
    if node is not None:
        from sealift.prefetch.node_label import apply_node_labels, complete_versions

        labels = apply_node_labels(node, result.name, complete_versions(dest, result.name))
        progress.note(f"node {node} labelled: {', '.join(sorted(labels))}")
    if json_output:
        _emit_json(
            {
                "nodeLabels": labels,
                "path": str(result.path),
                "name": result.name,
                "manifestDigest": result.manifest_digest,
                "files": result.files,
                "bytesFetched": result.bytes_fetched,
                "bytesReused": result.bytes_reused,
                "signers": list(result.signers),
                "removedVersions": list(result.removed_versions),
            }
        )
    else:
        click.echo(
            f"ready: {result.path} ({result.files} files, {result.bytes_fetched} bytes fetched,"
            f" {result.bytes_reused} reused), signed by {', '.join(result.signers)}"
        )
    if server is not None:
        # Stay up, idle: the DaemonSet's rollout then means "weights on every node".
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        stop.wait()
        server.stop()


@main.group()
def weights() -> None:
    """Sign, verify and re-sign model weights (OpenSSF model-signing format)."""


def _weights_target(path: Path) -> str:
    """A plain model folder, or a bundle (a folder with sealift-bundle.json, a tar, a part)."""
    from sealift.bundles import layout

    if path.is_dir() and not (path / layout.BUNDLE_MANIFEST_FILE).exists():
        return "folder"
    return "bundle"


@weights.command("sign")
@click.argument("target", metavar="MODEL_DIR|BUNDLE", type=click.Path(path_type=Path))
@signing_options("")
@click.option(
    "--signature",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Signature file for a model folder (default: MODEL_DIR.sig beside the folder).",
)
@SIGNER_NAME
@JOBS
@output_options
def weights_sign(
    target: Path,
    key: Path | None,
    cert: Path | None,
    chain: Path | None,
    key_password_file: Path | None,
    pkcs11_uri: str | None,
    signature: Path | None,
    signer_name: str | None,
    jobs: int,
    progress: Progress,
    json_output: bool,
) -> None:
    """Sign a model folder (hashing it once) or every model of a bundle (no hashing)."""
    from sealift.bundles.blob_source import open_bundle
    from sealift.signing.weights import read_manifest, sign_bundle, sign_folder

    signer = _signer(key, cert, chain, key_password_file, pkcs11_uri)
    if _weights_target(target) == "folder":
        out = signature or target.with_name(target.name + ".sig")
        manifest = sign_folder(target, signer, out, jobs=jobs, progress=progress)
        written = [str(out)]
        summary = f"signed {len(manifest.files)} files of {target} as {signer.description}"
    else:
        with open_bundle(target) as source:
            written = sign_bundle(source, read_manifest(source), signer, signer_name or "vendor")
        summary = f"signed the models and manifest of {target} as {signer.description}"
    if json_output:
        _emit_json({"signatures": written, "signer": signer.description})
        return
    for path in written:
        click.echo(f"wrote {path}")
    click.echo(summary)


@weights.command("verify")
@click.argument("target", metavar="MODEL_DIR|BUNDLE", type=click.Path(path_type=Path))
@trust_options
@click.option(
    "--signature",
    "signatures",
    multiple=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="Signature file(s) of a model folder (default: MODEL_DIR.sig).",
)
@JOBS
@output_options
def weights_verify(
    target: Path,
    policy: Path | None,
    trust_key: Path | None,
    signatures: tuple[Path, ...],
    jobs: int,
    progress: Progress,
    json_output: bool,
) -> None:
    """Check the weights' signatures under the trust policy, then hash every file once."""
    from sealift.bundles.blob_source import open_bundle
    from sealift.signing.weights import verify_bundle_weights, verify_folder

    trust = _policy(policy, trust_key, required=True)
    if _weights_target(target) == "folder":
        paths = list(signatures) or [target.with_name(target.name + ".sig")]
        reports = [verify_folder(target, paths, trust, jobs=jobs, progress=progress)]
    else:
        with open_bundle(target) as source:
            reports = verify_bundle_weights(source, trust, jobs=jobs, progress=progress)
    if json_output:
        _emit_json(
            [
                {
                    "subject": r.subject,
                    "signers": list(r.signers),
                    "identities": list(r.identities),
                    "files": r.files,
                    "bytes": r.bytes,
                }
                for r in reports
            ]
        )
        return
    for report in reports:
        click.echo(report.line())


@weights.command("resign")
@click.argument("bundle_path", metavar="BUNDLE", type=click.Path(path_type=Path))
@trust_options
@signing_options("")
@SIGNER_NAME
@JOBS
@output_options
def weights_resign(
    bundle_path: Path,
    policy: Path | None,
    trust_key: Path | None,
    key: Path | None,
    cert: Path | None,
    chain: Path | None,
    key_password_file: Path | None,
    pkcs11_uri: str | None,
    signer_name: str | None,
    jobs: int,
    progress: Progress,
    json_output: bool,
) -> None:
    """Verify the vendor's signatures and weights, then add yours beside them.

    The weights are hashed once; your signature covers exactly the manifest that pass verified.
    The vendor's signatures are kept. For a tar bundle, signatures go to NAME.tar.signatures/.
    """
    from sealift.bundles.blob_source import open_bundle
    from sealift.signing.weights import resign_bundle

    trust = _policy(policy, trust_key, required=True)
    signer = _signer(key, cert, chain, key_password_file, pkcs11_uri)
    with open_bundle(bundle_path) as source:
        reports, written = resign_bundle(
            source, trust, signer, signer_name or "customer", jobs=jobs, progress=progress
        )
    if json_output:
        _emit_json({"verified": [r.subject for r in reports], "signatures": written})
        return
    for report in reports:
        click.echo(report.line())
    for path in written:
        click.echo(f"wrote {path}")
    click.echo(f"re-signed {len(reports)} model(s) and the bundle manifest as {signer.description}")


if __name__ == "__main__":
    main()
