"""Bad input to ``bundle create``, ``bundle verify`` and ``bundle inspect``, through the real CLI.

The product rule under test: bad input gets one clear line, ``error: MESSAGE (hint: HINT)``,
that names the offending input; the exit code says which family failed (2 input, 3 integrity,
4 remote); and nothing half-written is left that looks complete (no ``sealift-bundle.json`` in a
directory output, no ``X.tar`` / ``X.tar.NNN`` / ``X.tar.parts.json`` for a tar output).
``bundle verify`` instead prints one line per problem, then a summary, and exits 3.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from support.content import (
    canonical_json,
    gzip_bytes,
    package_chart_tgz,
    sha256_digest,
    write_chart,
    write_docker_archive,
    write_model_folder,
    write_oci_image_layout,
)
from support.registry_server import RegistryServer, free_port

from sealift.cli import main

EXIT_INPUT = 2
EXIT_INTEGRITY = 3
EXIT_REMOTE = 4
EXIT_INTERRUPTED = 130

HEADER = 'apiVersion: sealift.dev/v1alpha1\nkind: Bundle\nmetadata: {name: demo, version: "1.0"}\n'
PART_SIZE = "1MiB"
NONDISTRIBUTABLE = "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip"
FOREIGN = "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip"
REF_NAME = "org.opencontainers.image.ref.name"
_ABSOLUTE_PATH = re.compile(r"(?<![\w.])/[^\s:'\"(),]+")


# --------------------------------------------------------------------------- helpers


def cli(*args: object) -> Result:
    """Run the real CLI in-process; stdout and stderr stay apart."""
    return CliRunner().invoke(main, [str(a) for a in args])


def create(bundle_file: Path, output: Path, *extra: object) -> Result:
    return cli("bundle", "create", "-q", "-f", bundle_file, "-o", output, *extra)


def verify(bundle: Path, *extra: object) -> Result:
    return cli("bundle", "verify", "-q", bundle, *extra)


def inspect(bundle: Path) -> Result:
    return cli("bundle", "inspect", bundle)


def bundle_file(folder: Path, body: str = "", *, name: str = "sealift.yaml") -> Path:
    """A bundle file: the standard header plus ``body`` (paths in it may be absolute)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(HEADER + textwrap.dedent(body))
    return path


def assert_error(result: Result, code: int, *names: object) -> str:
    """One ``error: ... (hint: ...)`` line naming every one of ``names``; returns the line
    with absolute paths replaced by ``<path>``."""
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert "internal error" not in line, line
    assert "(hint: " in line and line.endswith(")"), line
    hint = line.split("(hint: ", 1)[1]
    assert len(hint.strip(" )")) > 5, line
    for name in names:
        assert str(name) in line, (str(name), line)
    # What callers check next are words of the message, not of a test's tmp_path.
    return _ABSOLUTE_PATH.sub("<path>", line)


def assert_click_error(result: Result, *names: object) -> str:
    """A click usage error: exit 2, one ``Error:`` line naming the input, with a hint."""
    assert result.exit_code == EXIT_INPUT, (result.exit_code, result.stderr)
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.lower().startswith("error:")]
    assert len(lines) == 1, result.stderr
    for name in names:
        assert str(name) in lines[0], (str(name), lines[0])
    assert "hint:" in lines[0], lines[0]
    return lines[0]


def sha256_file(path: Path) -> str:
    hasher = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            hasher.update(chunk)
    return hasher.hexdigest()


def assert_blobs_complete(folder: Path) -> None:
    """Every file at a final blob name is complete: its content hashes to its name."""
    blobs = folder / "blobs" / "sha256"
    if not blobs.is_dir():
        return
    for blob in blobs.iterdir():
        assert blob.is_file(), blob
        assert sha256_file(blob) == blob.name, f"half-written blob at a final name: {blob}"


def assert_nothing_published(output: Path) -> None:
    """Nothing that looks like a finished bundle, and no half-written blob at a final name.

    A tar output may keep finished parts and a resume journal for a re-run, but never the
    final ``X.tar`` or the parts index ``X.tar.parts.json``; ``bundle verify`` refuses it.
    """
    if output.suffix == ".tar":
        assert not output.exists(), f"{output} exists after a failed create"
        index = Path(str(output) + ".parts.json")
        assert not index.exists(), f"{index} exists after a failed create"
        assert verify(output).exit_code != 0
        return
    for name in ("sealift-bundle.json", "index.json", "oci-layout"):
        assert not (output / name).exists(), f"{output / name} exists after a failed create"
    assert_blobs_complete(output)
    # Only the resume cache of local files' digests may stay; never a partial blob.
    work = output / ".sealift-work"
    left = sorted(p.name for p in work.iterdir()) if work.exists() else []
    assert left in ([], ["source-digests.json"]), f"work folder left after a clean failure: {left}"
    if output.exists():
        assert verify(output).exit_code == EXIT_INTEGRITY


def assert_refused_both_outputs(
    spec: Path, tmp_path: Path, code: int, *names: object
) -> tuple[str, str]:
    """Run create into a folder and into a split tar; both refuse and publish nothing."""
    folder = tmp_path / "out"
    tar = tmp_path / "out.tar"
    line_dir = assert_error(create(spec, folder), code, *names)
    assert_nothing_published(folder)
    line_tar = assert_error(create(spec, tar, "--split", PART_SIZE), code, *names)
    assert_nothing_published(tar)
    return line_dir, line_tar


def problems_of(result: Result) -> list[str]:
    """Verify's problem lines (stdout minus the summary); checks the failing summary."""
    assert result.exit_code == EXIT_INTEGRITY, (result.exit_code, result.stdout, result.stderr)
    lines = result.stdout.strip().splitlines()
    assert lines, result.stderr
    assert lines[-1].startswith("FAILED with"), lines[-1]
    assert f"FAILED with {len(lines) - 1} problem(s)" in lines[-1], result.stdout
    return lines[:-1]


def index_entry(bundle_dir: Path, ref: str) -> dict[str, Any]:
    index = json.loads((bundle_dir / "index.json").read_bytes())
    for entry in index["manifests"]:
        if entry.get("annotations", {}).get(REF_NAME) == ref:
            return dict(entry)
    raise AssertionError(f"{ref} not in index.json")


def blob_path(folder: Path, digest: str) -> Path:
    return folder / "blobs" / "sha256" / digest.removeprefix("sha256:")


def image_layer_digest(bundle_dir: Path, ref: str = "app:1") -> str:
    manifest = json.loads(
        blob_path(bundle_dir, index_entry(bundle_dir, ref)["digest"]).read_bytes()
    )
    return str(manifest["layers"][0]["digest"])


def flip_byte(path: Path, offset: int) -> None:
    with path.open("r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0x01]))


def copy_split(source: Path, folder: Path) -> Path:
    """Copy a split tar bundle (parts and index) into ``folder``; return the new base path."""
    folder.mkdir(parents=True, exist_ok=True)
    for path in source.parent.glob(source.name + ".*"):
        shutil.copy2(path, folder / path.name)
    return folder / source.name


def split_parts(base: Path) -> list[Path]:
    index = json.loads(Path(str(base) + ".parts.json").read_text())
    return [base.parent / part["name"] for part in index["parts"]]


def tar_members(base: Path) -> list[tuple[tarfile.TarInfo, bytes]]:
    """Every member of a split tar, with its data (small bundles only)."""
    data = b"".join(part.read_bytes() for part in split_parts(base))
    out = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as archive:
        for member in archive:
            content = b""
            if member.isreg():
                extracted = archive.extractfile(member)
                assert extracted is not None
                content = extracted.read()
            out.append((member, content))
    return out


def retar(base: Path, target: Path, extra: Callable[[tarfile.TarFile], None]) -> Path:
    """Rewrite a split tar bundle as one tar at ``target`` with ``extra`` members appended."""
    with tarfile.open(target, "w", format=tarfile.PAX_FORMAT) as archive:
        for member, content in tar_members(base):
            archive.addfile(member, io.BytesIO(content) if member.isreg() else None)
        extra(archive)
    return target


def add_member(
    archive: tarfile.TarFile, name: str, data: bytes = b"x", *, link_to: str | None = None
) -> None:
    info = tarfile.TarInfo(name)
    info.mtime = 0
    if link_to is not None:
        info.type = tarfile.LNKTYPE
        info.linkname = link_to
        archive.addfile(info)
        return
    info.size = len(data)
    archive.addfile(info, io.BytesIO(data))


def rewrite_layout_manifest(layout_dir: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Edit the (single) image manifest of an OCI layout and re-point index.json at it."""
    index = json.loads((layout_dir / "index.json").read_bytes())
    entry = index["manifests"][0]
    manifest = json.loads(blob_path(layout_dir, entry["digest"]).read_bytes())
    change(manifest)
    content = canonical_json(manifest)
    digest = sha256_digest(content)
    blob_path(layout_dir, digest).write_bytes(content)
    entry.update(digest=digest, size=len(content))
    (layout_dir / "index.json").write_bytes(canonical_json(index))


# --------------------------------------------------------------------------- shared content


class Sources:
    """Good inputs shared by the module: an image layout, a model, a chart and a file."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.image = root / "image"
        write_oci_image_layout(
            self.image,
            ref_name="app:1",
            layers=[
                {"etc/hello": b"hello\n", "srv/data.bin": hashlib.shake_256(b"x").digest(8192)}
            ],
        )
        self.model = root / "model"
        # Two 700 KiB shards: the bundle is ~1.4 MiB, so a 1 MiB split gives two parts.
        write_model_folder(self.model, shard_size=700 * 1024)
        self.chart = package_chart_tgz(write_chart(root / "chart-src"), root / "chart.tgz")
        self.ca = root / "ca.pem"
        self.ca.write_text("-----BEGIN CERTIFICATE-----\nnot really\n-----END CERTIFICATE-----\n")
        self.spec = bundle_file(
            root,
            f"""\
            images:
              - {{ref: "app:1", layout: "{self.image}"}}
            charts:
              - path: "{self.chart}"
            models:
              - {{name: tiny, version: "1", path: "{self.model}"}}
            files:
              - path: "{self.ca}"
            """,
        )


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> Sources:
    return Sources(tmp_path_factory.mktemp("sources"))


@pytest.fixture(scope="module")
def good_dir(sources: Sources, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished directory bundle; tests copy it before damaging it."""
    output = tmp_path_factory.mktemp("good-dir") / "bundle"
    result = create(sources.spec, output)
    assert result.exit_code == 0, result.stderr
    assert verify(output).exit_code == 0
    return output


@pytest.fixture(scope="module")
def good_split(sources: Sources, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished split tar bundle (two parts); tests copy it before damaging it."""
    output = tmp_path_factory.mktemp("good-split") / "bundle.tar"
    result = create(sources.spec, output, "--split", PART_SIZE)
    assert result.exit_code == 0, result.stderr
    assert len(split_parts(output)) == 2
    assert verify(output, "--parts").exit_code == 0
    return output


@pytest.fixture
def damaged_dir(good_dir: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "bundle"
    shutil.copytree(good_dir, copy)
    return copy


@pytest.fixture
def damaged_split(good_split: Path, tmp_path: Path) -> Path:
    return copy_split(good_split, tmp_path / "copy")


# --------------------------------------------------------------------------- the bundle file


def test_missing_bundle_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    assert_error(create(missing, tmp_path / "out"), EXIT_INPUT, missing)
    assert_nothing_published(tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_invalid_yaml_names_the_line(tmp_path: Path) -> None:
    spec = tmp_path / "sealift.yaml"
    spec.write_text(
        "apiVersion: sealift.dev/v1alpha1\n"
        "kind: Bundle\n"
        "metadata:\n"
        "  name: demo\n"
        '  version: "1.0"\n'
        "images:\n"
        "  - ref: app:1\n"
        "   layout: img\n"  # line 8: one space short
    )
    line = assert_error(create(spec, tmp_path / "out"), EXIT_INPUT, spec, "line 8")
    assert "YAML" in line
    assert not (tmp_path / "out").exists()


def test_duplicate_key_is_refused_with_its_line(tmp_path: Path) -> None:
    spec = tmp_path / "sealift.yaml"
    spec.write_text(
        "apiVersion: sealift.dev/v1alpha1\n"
        "kind: Bundle\n"
        "metadata:\n"
        "  name: demo\n"
        '  version: "1.0"\n'
        "  name: other\n"  # line 6: PyYAML alone would silently keep this one
    )
    assert_error(create(spec, tmp_path / "out"), EXIT_INPUT, spec, "line 6", "duplicate key 'name'")
    assert not (tmp_path / "out").exists()


def test_unknown_key_is_refused(tmp_path: Path, sources: Sources) -> None:
    spec = bundle_file(
        tmp_path, f'images:\n  - {{ref: "app:1", layout: "{sources.image}", foo: 1}}\n'
    )
    line = assert_error(create(spec, tmp_path / "out"), EXIT_INPUT, spec, "images[0]", "foo")
    assert "allowed keys here:" in line and "layout" in line
    assert not (tmp_path / "out").exists()


def test_unknown_key_message_names_the_full_key_path(tmp_path: Path, sources: Sources) -> None:
    spec = bundle_file(
        tmp_path, f'images:\n  - {{ref: "app:1", layout: "{sources.image}", foo: 1}}\n'
    )
    assert_error(create(spec, tmp_path / "out"), EXIT_INPUT, "images[0].foo")


def test_wrong_api_version(tmp_path: Path) -> None:
    spec = tmp_path / "sealift.yaml"
    spec.write_text(
        "apiVersion: sealift.dev/v2\nkind: Bundle\nmetadata: {name: demo, version: '1'}\n"
    )
    line = assert_error(create(spec, tmp_path / "out"), EXIT_INPUT, spec, "apiVersion")
    assert "sealift.dev/v1alpha1" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("version", "expect"),
    [("'a b'", "must match"), ("'-1'", "must match"), ("1.0", "type string")],
    ids=["space", "leading-dash", "unquoted-number"],
)
def test_bad_metadata_version(tmp_path: Path, version: str, expect: str) -> None:
    spec = tmp_path / "sealift.yaml"
    spec.write_text(
        "apiVersion: sealift.dev/v1alpha1\nkind: Bundle\n"
        f"metadata: {{name: demo, version: {version}}}\n"
    )
    line = assert_error(create(spec, tmp_path / "out"), EXIT_INPUT, spec, "metadata.version")
    assert expect in line
    assert not (tmp_path / "out").exists()


def test_layout_and_archive_in_one_image(tmp_path: Path, sources: Sources) -> None:
    spec = bundle_file(
        tmp_path,
        f'images:\n  - {{ref: "app:1", layout: "{sources.image}", archive: "x.tar"}}\n',
    )
    line = assert_error(create(spec, tmp_path / "out"), EXIT_INPUT, spec, "images[0]")
    assert "layout" in line and "archive" in line and "cannot be used together" in line
    assert not (tmp_path / "out").exists()


def test_duplicate_image_names(tmp_path: Path, sources: Sources) -> None:
    spec = bundle_file(
        tmp_path,
        f"""\
        images:
          - {{ref: "app:1", layout: "{sources.image}"}}
          - {{ref: "app:1", layout: "{sources.image}"}}
        """,
    )
    assert_error(create(spec, tmp_path / "out"), EXIT_INPUT, spec, "'app:1'", "twice")
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- sources


def test_missing_model_folder(tmp_path: Path) -> None:
    folder = tmp_path / "no-such-model"
    spec = bundle_file(tmp_path, f'models:\n  - {{name: m, version: "1", path: "{folder}"}}\n')
    assert_refused_both_outputs(spec, tmp_path, EXIT_INPUT, folder)


def test_missing_chart(tmp_path: Path) -> None:
    chart = tmp_path / "no-such-chart.tgz"
    spec = bundle_file(tmp_path, f'charts:\n  - path: "{chart}"\n')
    assert_refused_both_outputs(spec, tmp_path, EXIT_INPUT, chart)


def test_missing_extra_file(tmp_path: Path) -> None:
    extra = tmp_path / "no-such-file.pem"
    spec = bundle_file(tmp_path, f'files:\n  - path: "{extra}"\n')
    assert_refused_both_outputs(spec, tmp_path, EXIT_INPUT, extra)


def _chart_tgz(path: Path, members: list[tuple[str, bytes]]) -> Path:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name, data in members:
            add_member(archive, name, data)
    path.write_bytes(gzip_bytes(buffer.getvalue()))
    return path


CHART_YAML = b"apiVersion: v2\nname: evil\nversion: 0.1.0\n"


def test_chart_tgz_without_chart_yaml(tmp_path: Path) -> None:
    chart = _chart_tgz(tmp_path / "c.tgz", [("c/values.yaml", b"a: 1\n")])
    spec = bundle_file(tmp_path, f'charts:\n  - path: "{chart}"\n')
    line, _ = assert_refused_both_outputs(spec, tmp_path, EXIT_INPUT, chart)
    assert "Chart.yaml" in line


@pytest.mark.parametrize("entry", ["evil/../evil", "../evil", "/etc/evil"])
def test_chart_tgz_entry_escaping_the_chart(tmp_path: Path, entry: str) -> None:
    chart = _chart_tgz(tmp_path / "c.tgz", [("evil/Chart.yaml", CHART_YAML), (entry, b"pwned")])
    spec = bundle_file(tmp_path, f'charts:\n  - path: "{chart}"\n')
    line, _ = assert_refused_both_outputs(spec, tmp_path, EXIT_INPUT, chart, repr(entry))
    assert "escapes" in line
    assert not (tmp_path / "evil").exists() and not Path("/etc/evil").exists()


def test_chart_with_invalid_chart_yaml(tmp_path: Path) -> None:
    chart = _chart_tgz(tmp_path / "c.tgz", [("c/Chart.yaml", b"name: [c\n")])
    spec = bundle_file(tmp_path, f'charts:\n  - path: "{chart}"\n')
    assert_error(create(spec, tmp_path / "out"), EXIT_INPUT, chart, "Chart.yaml")


def test_model_symlink_leaving_the_folder(tmp_path: Path) -> None:
    model = tmp_path / "model"
    write_model_folder(model, shard_size=1024)
    secret = tmp_path / "secret.txt"
    secret.write_text("not for the bundle\n")
    (model / "notes.txt").symlink_to(secret)
    spec = bundle_file(tmp_path, f'models:\n  - {{name: m, version: "1", path: "{model}"}}\n')
    line, _ = assert_refused_both_outputs(spec, tmp_path, EXIT_INPUT, model, "notes.txt")
    assert "symlink" in line


def test_model_symlink_inside_the_folder_is_accepted(tmp_path: Path) -> None:
    model = tmp_path / "model"
    write_model_folder(model, shard_size=1024)
    (model / "sub").mkdir()
    (model / "sub" / "alias.json").symlink_to(Path("..") / "config.json")
    spec = bundle_file(tmp_path, f'models:\n  - {{name: m, version: "1", path: "{model}"}}\n')
    for output in (tmp_path / "dir", tmp_path / "one.tar"):
        result = create(spec, output)
        assert result.exit_code == 0, result.stderr
        assert verify(output).exit_code == 0
    manifest = json.loads(
        blob_path(
            tmp_path / "dir", index_entry(tmp_path / "dir", "models/m:1")["digest"]
        ).read_bytes()
    )
    paths = {layer["annotations"]["org.cncf.model.filepath"] for layer in manifest["layers"]}
    assert "sub/alias.json" in paths


def test_model_file_name_with_backslash(tmp_path: Path) -> None:
    model = tmp_path / "model"
    write_model_folder(model, shard_size=1024)
    (model / "weird\\name.json").write_text("{}\n")
    spec = bundle_file(tmp_path, f'models:\n  - {{name: m, version: "1", path: "{model}"}}\n')
    assert_error(create(spec, tmp_path / "out"), EXIT_INPUT, model, "weird")


def test_image_layout_without_oci_layout_file(tmp_path: Path, sources: Sources) -> None:
    layout_dir = tmp_path / "layout"
    shutil.copytree(sources.image, layout_dir)
    (layout_dir / "oci-layout").unlink()
    spec = bundle_file(tmp_path, f'images:\n  - {{ref: "app:1", layout: "{layout_dir}"}}\n')
    line, _ = assert_refused_both_outputs(spec, tmp_path, EXIT_INPUT, layout_dir)
    assert "oci-layout" in line


def _docker_archive_without_a_layer(tmp_path: Path) -> tuple[Path, str]:
    whole = tmp_path / "whole.tar"
    write_docker_archive(whole, repo_tag="app:1", layers=[{"a": b"1"}, {"b": b"2"}])
    broken = tmp_path / "broken.tar"
    dropped = ""
    with tarfile.open(whole) as source, tarfile.open(broken, "w") as target:
        for member in source:
            if member.name.endswith("/layer.tar") and not dropped:
                dropped = member.name
                continue
            target.addfile(member, source.extractfile(member) if member.isreg() else None)
    return broken, dropped


def test_docker_archive_with_a_missing_layer_is_refused(tmp_path: Path) -> None:
    archive, dropped = _docker_archive_without_a_layer(tmp_path)
    spec = bundle_file(tmp_path, f'images:\n  - {{ref: "app:1", archive: "{archive}"}}\n')
    for output, extra in ((tmp_path / "out", ()), (tmp_path / "out.tar", ("--split", PART_SIZE))):
        result = create(spec, output, *extra)
        assert result.exit_code in (EXIT_INPUT, EXIT_INTEGRITY), result.stderr
        assert str(archive) in result.stderr and dropped in result.stderr
        assert_nothing_published(output)


def test_docker_archive_missing_layer_message_has_a_hint(tmp_path: Path) -> None:
    archive, dropped = _docker_archive_without_a_layer(tmp_path)
    spec = bundle_file(tmp_path, f'images:\n  - {{ref: "app:1", archive: "{archive}"}}\n')
    assert_error(create(spec, tmp_path / "out"), EXIT_INTEGRITY, archive, dropped)


def test_extra_file_with_wrong_sha256(tmp_path: Path, sources: Sources) -> None:
    wrong = "0" * 64
    spec = bundle_file(
        tmp_path,
        f"""\
        models:
          - {{name: tiny, version: "1", path: "{sources.model}"}}
        files:
          - {{path: "{sources.ca}", sha256: "{wrong}"}}
        """,
    )
    line, _ = assert_refused_both_outputs(
        spec, tmp_path, EXIT_INTEGRITY, sources.ca.name, f"sha256:{wrong}"
    )
    assert f"sha256:{sha256_file(sources.ca)}" in line


def test_layout_with_a_modified_layer_blob(tmp_path: Path, sources: Sources) -> None:
    layout_dir = tmp_path / "layout"
    shutil.copytree(sources.image, layout_dir)
    entry = json.loads((layout_dir / "index.json").read_bytes())["manifests"][0]
    manifest = json.loads(blob_path(layout_dir, entry["digest"]).read_bytes())
    layer = manifest["layers"][0]["digest"]
    flip_byte(blob_path(layout_dir, layer), 40)
    spec = bundle_file(tmp_path, f'images:\n  - {{ref: "app:1", layout: "{layout_dir}"}}\n')
    line, _ = assert_refused_both_outputs(spec, tmp_path, EXIT_INTEGRITY, layer)
    assert "layer 1 of app:1" in line


@pytest.mark.parametrize("media_type", [NONDISTRIBUTABLE, FOREIGN], ids=["oci", "docker"])
def test_unsupported_layer_media_type(tmp_path: Path, sources: Sources, media_type: str) -> None:
    layout_dir = tmp_path / "layout"
    shutil.copytree(sources.image, layout_dir)

    def foreign(manifest: dict[str, Any]) -> None:
        manifest["layers"][0]["mediaType"] = media_type

    rewrite_layout_manifest(layout_dir, foreign)
    spec = bundle_file(tmp_path, f'images:\n  - {{ref: "app:1", layout: "{layout_dir}"}}\n')
    line, _ = assert_refused_both_outputs(spec, tmp_path, EXIT_INPUT, media_type, "app:1")
    assert "layer 1" in line


def test_unreachable_registry(tmp_path: Path) -> None:
    host = f"127.0.0.1:{free_port()}"
    spec = bundle_file(tmp_path, f'images:\n  - ref: "{host}/errors/unreachable:1"\n')
    for extra in ((), ("--plain-http", host)):
        line = assert_error(create(spec, tmp_path / "out", *extra), EXIT_REMOTE, host)
        assert "unreachable" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.registry
def test_image_not_found_in_registry(tmp_path: Path, registry: RegistryServer) -> None:
    reference = f"{registry.host}/errors/not-found:1"
    spec = bundle_file(tmp_path, f'images:\n  - ref: "{reference}"\n')
    result = create(spec, tmp_path / "out", "--plain-http", registry.host)
    line = assert_error(result, EXIT_INPUT, reference)
    assert "not found" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.registry
def test_https_to_a_plain_http_registry(tmp_path: Path, registry: RegistryServer) -> None:
    spec = bundle_file(tmp_path, f'images:\n  - ref: "{registry.host}/errors/tls:1"\n')
    line = assert_error(create(spec, tmp_path / "out"), EXIT_REMOTE, registry.host)
    assert "TLS" in line and "--plain-http" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.registry
def test_https_to_a_plain_http_registry_says_it_does_not_speak_tls(
    tmp_path: Path, registry: RegistryServer
) -> None:
    spec = bundle_file(tmp_path, f'images:\n  - ref: "{registry.host}/errors/tls2:1"\n')
    line = assert_error(create(spec, tmp_path / "out"), EXIT_REMOTE, "does not speak TLS")
    assert f"--plain-http {registry.host}" in line
    assert "certificate" not in line


# --------------------------------------------------------------------------- output


def test_split_without_tar_output_is_refused(tmp_path: Path, sources: Sources) -> None:
    output = tmp_path / "out"
    result = create(sources.spec, output, "--split", PART_SIZE)
    assert result.exit_code == EXIT_INPUT, result.stderr
    assert "--split" in result.stderr and ".tar" in result.stderr
    assert not output.exists()


def test_split_without_tar_output_has_the_error_format(tmp_path: Path, sources: Sources) -> None:
    result = create(sources.spec, tmp_path / "out", "--split", PART_SIZE)
    assert_error(result, EXIT_INPUT, "--split", "out")


@pytest.mark.parametrize("value", ["0", "abc", "-5", "1.5.5GiB"])
def test_bad_split_values(tmp_path: Path, sources: Sources, value: str) -> None:
    output = tmp_path / "out.tar"
    line = assert_click_error(create(sources.spec, output, "--split", value), "--split")
    assert repr(value) in line or value in line
    assert_nothing_published(output)


def test_split_smaller_than_a_mebibyte(tmp_path: Path, sources: Sources) -> None:
    output = tmp_path / "out.tar"
    assert_error(create(sources.spec, output, "--split", "1000"), EXIT_INPUT, "--split 1000")
    assert_nothing_published(output)


def test_existing_finished_bundle_dir_is_not_touched(
    good_dir: Path, sources: Sources, tmp_path: Path
) -> None:
    output = tmp_path / "bundle"
    shutil.copytree(good_dir, output)
    before = {p.relative_to(output): p.stat().st_mtime_ns for p in output.rglob("*")}
    line = assert_error(create(sources.spec, output), EXIT_INPUT, output)
    assert "finished bundle" in line
    after = {p.relative_to(output): p.stat().st_mtime_ns for p in output.rglob("*")}
    assert after == before
    assert verify(output).exit_code == 0


def test_existing_split_tar_is_not_touched(
    good_split: Path, sources: Sources, tmp_path: Path
) -> None:
    output = copy_split(good_split, tmp_path / "copy")
    before = {p.name: sha256_file(p) for p in output.parent.iterdir()}
    result = create(sources.spec, output, "--split", PART_SIZE)
    assert_error(result, EXIT_INPUT, "already exists")
    assert {p.name: sha256_file(p) for p in output.parent.iterdir()} == before


def test_non_empty_folder_that_is_not_a_bundle(tmp_path: Path, sources: Sources) -> None:
    output = tmp_path / "photos"
    output.mkdir()
    (output / "holiday.jpg").write_bytes(b"\xff\xd8 precious")
    assert_error(create(sources.spec, output), EXIT_INPUT, output, "not empty")
    assert sorted(p.name for p in output.iterdir()) == ["holiday.jpg"]
    assert (output / "holiday.jpg").read_bytes() == b"\xff\xd8 precious"


def test_output_that_is_a_file(tmp_path: Path, sources: Sources) -> None:
    output = tmp_path / "notes.txt"
    output.write_text("keep me\n")
    assert_error(create(sources.spec, output), EXIT_INPUT, output)
    assert output.read_text() == "keep me\n"


@pytest.fixture
def other_filesystem(tmp_path: Path) -> Iterator[Path]:
    for candidate in ("/dev/shm", "/run/user", "/var/tmp", "/tmp"):
        parent = Path(candidate)
        if not parent.is_dir() or not os.access(parent, os.W_OK):
            continue
        if os.stat(parent).st_dev == os.stat(tmp_path).st_dev:
            continue
        folder = Path(tempfile.mkdtemp(prefix="sealift-test-", dir=parent))
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return
    pytest.skip("no writable folder on another filesystem than the test's tmp_path")


def test_tmpdir_on_another_filesystem(
    tmp_path: Path, sources: Sources, other_filesystem: Path
) -> None:
    output = tmp_path / "out"
    line = assert_error(
        create(sources.spec, output, "--tmpdir", other_filesystem), EXIT_INPUT, other_filesystem
    )
    assert "--tmpdir" in line and "filesystem" in line
    assert_nothing_published(output)
    assert list(other_filesystem.iterdir()) == []


# --------------------------------------------------------------------------- damaged bundles


def test_flipped_byte_in_a_layer_of_a_dir_bundle(damaged_dir: Path) -> None:
    layer = image_layer_digest(damaged_dir)
    path = blob_path(damaged_dir, layer)
    flip_byte(path, path.stat().st_size // 2)
    problems = problems_of(verify(damaged_dir))
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"digest: {layer}")
    assert "image app:1" in problems[0] and str(path) in problems[0]
    assert inspect(damaged_dir).exit_code == 0  # inspect does not re-hash, by design


def _member_inside_one_part(base: Path, part_number: int) -> tuple[str, bytes, int]:
    """A regular member whose data lies wholly in part ``part_number``: name, data, offset."""
    parts = split_parts(base)
    starts = [0]
    for part in parts:
        starts.append(starts[-1] + part.stat().st_size)
    first, end = starts[part_number], starts[part_number + 1]
    candidates = [
        (member.name, data, member.offset_data - first)
        for member, data in tar_members(base)
        if member.isreg()
        and member.size > 64
        and first <= member.offset_data
        and member.offset_data + member.size <= end
        and member.name.startswith(("blobs/", "models/", "files/"))
    ]
    assert candidates, f"no blob wholly inside part {part_number}"
    return max(candidates, key=lambda c: len(c[1]))


@pytest.mark.parametrize("part_number", [0, 1])
def test_flipped_byte_inside_one_part_of_a_split_tar(damaged_split: Path, part_number: int) -> None:
    name, data, offset = _member_inside_one_part(damaged_split, part_number)
    part = split_parts(damaged_split)[part_number]
    flip_byte(part, offset + len(data) // 2)
    problems = problems_of(verify(damaged_split))
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"digest: {sha256_digest(data)}"), (name, problems)
    assert f"[{part.name} at offset" in problems[0]
    others = [p.name for p in split_parts(damaged_split) if p != part]
    assert not any(other in problems[0] for other in others)


def test_verify_parts_names_the_part_whose_sha256_differs(damaged_split: Path) -> None:
    # The last byte is in tar's end-of-archive zeros: no blob changes, only the part's sha256.
    last = split_parts(damaged_split)[-1]
    flip_byte(last, last.stat().st_size - 1)
    assert verify(damaged_split).exit_code == 0
    problems = problems_of(verify(damaged_split, "--parts"))
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"part: {last.name}")
    assert sha256_file(last) in problems[0]
    summary = verify(damaged_split, "--parts").stdout.strip().splitlines()[-1]
    assert "2 parts" in summary


@pytest.mark.parametrize("command", ["verify", "inspect"])
def test_missing_part(damaged_split: Path, command: str) -> None:
    missing = split_parts(damaged_split)[1]
    missing.unlink()
    for given in (damaged_split, damaged_split.with_name(damaged_split.name + ".000")):
        result = cli("bundle", command, given)
        line = assert_error(result, EXIT_INPUT, missing)
        assert "missing" in line


@pytest.mark.parametrize("command", ["verify", "inspect"])
def test_truncated_part(damaged_split: Path, command: str) -> None:
    part = split_parts(damaged_split)[0]
    size = part.stat().st_size
    with part.open("r+b") as handle:
        handle.truncate(size // 2)
    line = assert_error(cli("bundle", command, damaged_split), EXIT_INTEGRITY, part)
    assert str(size // 2) in line and str(size) in line


def test_parts_index_naming_a_part_outside_its_folder(damaged_split: Path) -> None:
    index_path = Path(str(damaged_split) + ".parts.json")
    index = json.loads(index_path.read_text())
    index["parts"][0]["name"] = "../" + index["parts"][0]["name"]
    index_path.write_text(json.dumps(index))
    assert_error(verify(damaged_split), EXIT_INTEGRITY, index_path, "../")


def test_extra_unreferenced_blob(damaged_dir: Path) -> None:
    content = b"smuggled\n"
    digest = sha256_digest(content)
    blob_path(damaged_dir, digest).write_bytes(content)
    problems = problems_of(verify(damaged_dir))
    assert problems == [
        f"extra: {digest} [{blob_path(damaged_dir, digest)}]: blob not referenced by any artifact"
    ]


def test_stray_file_in_a_dir_bundle(damaged_dir: Path) -> None:
    (damaged_dir / "README.txt").write_text("stray\n")
    problems = problems_of(verify(damaged_dir))
    assert len(problems) == 1 and problems[0].startswith("extra: README.txt"), problems


def test_missing_blob(damaged_dir: Path) -> None:
    layer = image_layer_digest(damaged_dir)
    blob_path(damaged_dir, layer).unlink()
    problems = problems_of(verify(damaged_dir))
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"missing: {layer} (needed by image app:1)")


@pytest.mark.parametrize("command", ["verify", "inspect"])
def test_dir_bundle_without_bundle_manifest(damaged_dir: Path, command: str) -> None:
    (damaged_dir / "sealift-bundle.json").unlink()
    line = assert_error(cli("bundle", command, damaged_dir), EXIT_INTEGRITY, damaged_dir)
    assert "sealift-bundle.json" in line and "interrupted" in line


def test_tampered_index_json(damaged_dir: Path) -> None:
    index = json.loads((damaged_dir / "index.json").read_bytes())
    forged = "sha256:" + "1" * 64
    for entry in index["manifests"]:
        if entry["annotations"][REF_NAME] == "app:1":
            entry["digest"] = forged
    (damaged_dir / "index.json").write_bytes(canonical_json(index))
    problems = problems_of(verify(damaged_dir))
    assert len(problems) == 1, problems
    assert problems[0].startswith("index: index.json (needed by image app:1)")
    assert forged in problems[0]


def test_index_json_listing_an_unsigned_artifact(damaged_dir: Path) -> None:
    index = json.loads((damaged_dir / "index.json").read_bytes())
    extra = dict(index["manifests"][0])
    extra["annotations"] = {REF_NAME: "evil:latest"}
    index["manifests"].append(extra)
    (damaged_dir / "index.json").write_bytes(canonical_json(index))
    problems = problems_of(verify(damaged_dir))
    assert any("'evil:latest'" in p and "not signed" in p for p in problems), problems


@pytest.mark.parametrize("entry", ["../x", "/etc/x", "blobs/../../x"])
@pytest.mark.parametrize("command", ["verify", "inspect"])
def test_tar_with_an_entry_escaping_the_bundle(
    good_split: Path, tmp_path: Path, entry: str, command: str
) -> None:
    tar = retar(good_split, tmp_path / "evil.tar", lambda a: add_member(a, entry, b"pwned"))
    line = assert_error(cli("bundle", command, tar), EXIT_INTEGRITY, tar, repr(entry))
    assert "escapes the bundle" in line
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("target", ["/etc/passwd", "../../etc/passwd"])
@pytest.mark.parametrize("command", ["verify", "inspect"])
def test_tar_with_a_hard_link_pointing_outside(
    good_split: Path, tmp_path: Path, target: str, command: str
) -> None:
    name = "blobs/sha256/" + "a" * 64

    def link(archive: tarfile.TarFile) -> None:
        add_member(archive, name, link_to=target)

    tar = retar(good_split, tmp_path / "evil.tar", link)
    line = assert_error(cli("bundle", command, tar), EXIT_INTEGRITY, tar, name, target)
    assert "links out of the bundle" in line


def test_rebuilt_tar_without_damage_verifies(good_split: Path, tmp_path: Path) -> None:
    # The control for the two tests above: retar() itself does not break the bundle.
    tar = retar(good_split, tmp_path / "same.tar", lambda archive: None)
    assert verify(tar).exit_code == 0


# --------------------------------------------------------------------------- interruption


class _InterruptAfter:
    """Replaces a writer's copy_stream: the Nth copy writes some bytes, then is interrupted."""

    def __init__(self, original: Callable[..., Any], at: int, error: type[BaseException]) -> None:
        self.original = original
        self.at = at
        self.error = error
        self.calls = 0

    def __call__(self, source: Any, sinks: Any = (), **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls == self.at:
            data = source.read(1000)
            for sink in sinks:
                sink.write(data)
            raise self.error()
        return self.original(source, sinks, **kwargs)


def test_interrupted_dir_create_resumes_and_reuses_blobs(
    tmp_path: Path, sources: Sources, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sealift.bundles.directory_writer as directory_writer

    output = tmp_path / "out"
    interrupt = _InterruptAfter(directory_writer.copy_stream, 5, KeyboardInterrupt)
    monkeypatch.setattr(directory_writer, "copy_stream", interrupt)
    result = create(sources.spec, output, "--jobs", 1)
    assert result.exit_code == EXIT_INTERRUPTED, result.stderr
    assert "interrupted" in result.stderr and "run again" in result.stderr
    assert interrupt.calls == 5
    assert_nothing_published(output)
    kept = list((output / "blobs" / "sha256").iterdir())
    assert len(kept) == 4
    assert_error(verify(output), EXIT_INTEGRITY, "interrupted")

    monkeypatch.undo()
    result = create(sources.spec, output, "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    # Image blobs (digest known up front) are reused; model files are re-hashed by design.
    assert 0 < report["bytesReused"] <= sum(p.stat().st_size for p in kept)
    assert verify(output).exit_code == 0


def test_interrupted_split_tar_create_publishes_nothing_and_resumes(
    tmp_path: Path, sources: Sources, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sealift.bundles.tar_writer as tar_writer

    output = tmp_path / "out.tar"
    # Late enough that the first 1 MiB part was already finished and renamed.
    interrupt = _InterruptAfter(tar_writer.copy_stream, 8, KeyboardInterrupt)
    monkeypatch.setattr(tar_writer, "copy_stream", interrupt)
    result = create(sources.spec, output, "--split", PART_SIZE)
    assert result.exit_code == EXIT_INTERRUPTED, result.stderr
    assert "interrupted" in result.stderr
    assert interrupt.calls == 8
    assert_nothing_published(output)

    monkeypatch.undo()
    result = create(sources.spec, output, "--split", PART_SIZE, "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["bytesReused"] > 0
    assert verify(output, "--parts").exit_code == 0
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["out.tar.000", "out.tar.001", "out.tar.parts.json"], names


def test_interrupted_single_tar_create_says_incomplete_and_resumes(
    tmp_path: Path, sources: Sources, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sealift.bundles.tar_writer as tar_writer

    output = tmp_path / "out.tar"
    monkeypatch.setattr(
        tar_writer, "copy_stream", _InterruptAfter(tar_writer.copy_stream, 6, KeyboardInterrupt)
    )
    assert create(sources.spec, output).exit_code == EXIT_INTERRUPTED
    assert_nothing_published(output)
    line = assert_error(verify(output), EXIT_INPUT, output)
    assert "incomplete" in line and "interrupted" in line

    monkeypatch.undo()
    result = create(sources.spec, output, "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["bytesReused"] > 0
    assert verify(output).exit_code == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.tar"]


def test_interrupted_split_tar_create_is_reported_as_interrupted(
    tmp_path: Path, sources: Sources, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sealift.bundles.tar_writer as tar_writer

    output = tmp_path / "out.tar"
    monkeypatch.setattr(
        tar_writer, "copy_stream", _InterruptAfter(tar_writer.copy_stream, 8, KeyboardInterrupt)
    )
    assert create(sources.spec, output, "--split", PART_SIZE).exit_code == EXIT_INTERRUPTED
    assert (tmp_path / "out.tar.000").is_file()
    for given in (output, tmp_path / "out.tar.000"):
        line = assert_error(verify(given), EXIT_INPUT, given.name)
        assert "interrupted" in line


def test_rerun_after_a_failed_tar_create_with_corrected_input(
    tmp_path: Path, sources: Sources
) -> None:
    """A create that failed on bad input, re-run with the input fixed: it completes, or it
    refuses in one line naming the output; it never publishes a bundle of the old input."""
    body = f"""\
        models:
          - {{name: tiny, version: "1", path: "{sources.model}"}}
        files:
          - {{path: "{sources.ca}", sha256: "%s"}}
        """
    bad = bundle_file(tmp_path / "bad", body % ("0" * 64))
    good = bundle_file(tmp_path / "good", body % sha256_file(sources.ca))
    output = tmp_path / "out" / "bundle.tar"
    output.parent.mkdir()
    assert_error(create(bad, output, "--split", PART_SIZE), EXIT_INTEGRITY, sources.ca.name)
    assert_nothing_published(output)
    result = create(good, output, "--split", PART_SIZE)
    if result.exit_code == 0:
        assert verify(output, "--parts").exit_code == 0
    else:
        assert_error(result, EXIT_INPUT, output.name)
        assert_nothing_published(output)


_KILL_SCRIPT = """
import os, signal, sys
import sealift.bundles.directory_writer as directory_writer
original = directory_writer.copy_stream
calls = 0
def copy_stream(source, sinks=(), **kwargs):
    global calls
    calls += 1
    if calls == int(os.environ["SEALIFT_TEST_KILL_AT"]):
        data = source.read(4096)
        for sink in sinks:
            sink.write(data)
        sinks[0].flush()
        os.kill(os.getpid(), signal.SIGKILL)
    return original(source, sinks, **kwargs)
directory_writer.copy_stream = copy_stream
from sealift.cli import main
sys.argv[0] = "sealift"
main()
"""


def _killed_create(spec: Path, output: Path, kill_at: int) -> None:
    """``bundle create`` into ``output``, SIGKILLed in the middle of copying a blob."""
    env = {**os.environ, "SEALIFT_TEST_KILL_AT": str(kill_at)}
    args = ["bundle", "create", "-q", "--jobs", "1", "-f", str(spec), "-o", str(output)]
    completed = subprocess.run(
        [sys.executable, "-c", _KILL_SCRIPT, *args], env=env, capture_output=True, timeout=60
    )
    assert completed.returncode == -signal.SIGKILL, completed.stderr


def test_killed_dir_create_resumes_and_reuses_blobs(tmp_path: Path, sources: Sources) -> None:
    output = tmp_path / "out"
    _killed_create(sources.spec, output, kill_at=4)
    assert not (output / "sealift-bundle.json").exists()
    assert not (output / "index.json").exists()
    assert_blobs_complete(output)
    assert len(list((output / "blobs" / "sha256").iterdir())) == 3
    line = assert_error(verify(output), EXIT_INTEGRITY, output)
    assert "interrupted" in line

    result = create(sources.spec, output, "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["bytesReused"] > 0
    assert verify(output).exit_code == 0


def test_killed_dir_create_leaves_no_partial_blob_after_the_rerun(
    tmp_path: Path, sources: Sources
) -> None:
    output = tmp_path / "out"
    _killed_create(sources.spec, output, kill_at=4)
    assert any(p.is_file() for p in (output / ".sealift-work").rglob("*"))
    assert create(sources.spec, output).exit_code == 0
    leftovers = sorted(
        str(p.relative_to(output))
        for p in output.rglob("*")
        if not p.is_relative_to(output / "blobs")
    )
    assert leftovers == ["index.json", "oci-layout", "sealift-bundle.json"], leftovers
    assert verify(output).exit_code == 0
