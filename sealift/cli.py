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
from sealift.units import parse_size

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
    progress: Progress,
    json_output: bool,
) -> None:
    """Package images, charts, models and files into one offline bundle."""
    from sealift.bundles.bundle_file import load_bundle_file
    from sealift.bundles.create import CreateOptions, create_bundle

    spec = load_bundle_file(bundle_file)
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
@output_options
def bundle_verify(
    bundle_path: Path, jobs: int, parts: bool, progress: Progress, json_output: bool
) -> None:
    """Re-hash every blob and check the whole bundle; exit 3 on any problem."""
    from sealift.bundles.blob_source import open_bundle
    from sealift.bundles.verify import verify_bundle

    with open_bundle(bundle_path) as source:
        report = verify_bundle(source, jobs=jobs, progress=progress, parts=parts)
    if json_output:
        _emit_json(report.to_dict())
    else:
        for problem in report.problems:
            click.echo(problem.one_line())
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


if __name__ == "__main__":
    main()
