"""The prefetch image: ``bundle create`` puts sealift and its dependencies on a base with Python.

The claim under test is that the layer holds a working sealift for the target platform: the
built layer is taken out of the bundle and run by the host's own Debian Python 3.11 on
linux/amd64 (the target here), isolated from every other site folder, so a missing or
wrong-platform wheel fails an import. Also: the image's config and manifest, the same digest
from two builds (a directory and a tar bundle), skopeo reading it, its SBOM, and one clear error
line for each bad input.

The wheelhouse is built by ``tools/wheelhouse.sh`` (``make test`` runs it, with the network);
the tests never download.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tarfile
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from support.content import SKOPEO_BINARY, write_python_base_image

from sealift import __version__
from sealift.bundles.prefetch_image import ENTRYPOINT, LAUNCHER, SITE_PACKAGES
from sealift.cli import main

REPO = Path(__file__).resolve().parents[1]
PLATFORM = "linux/amd64"
PYTHON = "3.11"
WHEELHOUSE = Path(
    os.environ.get("SEALIFT_WHEELHOUSE", REPO / ".cache" / f"wheelhouse-linux-amd64-py{PYTHON}")
)
HOST_PYTHON = Path("/usr/bin/python3.11")
IMAGE = f"sealift/prefetch:{__version__}"
BASE = "python:3.11-slim"
BASE_PYTHONPATH = "/usr/lib/vendor-python"
EXIT_INPUT = 2


def _wheelhouse() -> Path:
    if not any(WHEELHOUSE.glob(f"sealift-{__version__}-*.whl")):
        pytest.skip(
            f"no wheelhouse with sealift {__version__} at {WHEELHOUSE}:"
            " run tools/wheelhouse.sh (make test does, with the network)"
        )
    return WHEELHOUSE


@pytest.fixture(scope="module")
def wheelhouse() -> Path:
    return _wheelhouse()


def write_bundle_file(folder: Path, wheels: Path | str, **prefetch: object) -> Path:
    """A bundle file with the base image (a layout) and a prefetchImage on it."""
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "base" / "index.json").exists():
        write_python_base_image(
            folder / "base", ref_name=BASE, env=[f"PYTHONPATH={BASE_PYTHONPATH}"]
        )
    settings: dict[str, object] = {"base": BASE, "wheels": str(wheels), "python": PYTHON}
    settings.update(prefetch)
    body = {
        "apiVersion": "sealift.dev/v1alpha1",
        "kind": "Bundle",
        "metadata": {"name": "prefetch-test", "version": "1.0"},
        "platforms": [PLATFORM],
        "images": [{"layout": "./base", "ref": BASE}],
        "prefetchImage": {k: v for k, v in settings.items() if v is not None},
    }
    path = folder / "sealift.yaml"
    path.write_text(json.dumps(body, indent=2))  # JSON is YAML
    return path


def create(bundle_file: Path, output: Path) -> Result:
    return CliRunner().invoke(
        main, ["bundle", "create", "-q", "-f", str(bundle_file), "-o", str(output)]
    )


def created(bundle_file: Path, output: Path) -> Path:
    result = create(bundle_file, output)
    assert result.exit_code == 0, result.stderr + result.stdout
    return output


@pytest.fixture(scope="module")
def bundles(wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The same bundle file built twice: into a directory and into a tar."""
    root = tmp_path_factory.mktemp("prefetch")
    bundle_file = write_bundle_file(root / "release", wheelhouse)
    directory = created(bundle_file, root / "bundle")
    tar = created(bundle_file, root / "bundle.tar")
    return directory, tar


@pytest.fixture(scope="module")
def bundle(bundles: tuple[Path, Path]) -> Path:
    return bundles[0]


def blob(bundle: Path, digest: str) -> bytes:
    return (bundle / "blobs" / "sha256" / digest.removeprefix("sha256:")).read_bytes()


def blob_path(bundle: Path, digest: str) -> Path:
    return bundle / "blobs" / "sha256" / digest.removeprefix("sha256:")


def artifact(manifest: dict[str, Any], ref: str) -> dict[str, Any]:
    return next(a for a in manifest["artifacts"] if a["ref"] == ref)


def bundle_manifest(bundle: Path) -> dict[str, Any]:
    if bundle.is_dir():
        return json.loads((bundle / "sealift-bundle.json").read_text())
    with tarfile.open(bundle) as tar:
        member = tar.extractfile("sealift-bundle.json")
        assert member is not None
        return json.loads(member.read())


def image(bundle: Path, ref: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """An image's manifest and config, read from a directory bundle."""
    manifest = json.loads(blob(bundle, artifact(bundle_manifest(bundle), ref)["digest"]))
    return manifest, json.loads(blob(bundle, manifest["config"]["digest"]))


@pytest.fixture(scope="module")
def image_root(bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sealift layer of the built image, unpacked as a container runtime would."""
    manifest, _ = image(bundle, IMAGE)
    root = tmp_path_factory.mktemp("image-root")
    with tarfile.open(blob_path(bundle, manifest["layers"][-1]["digest"]), "r:gz") as layer:
        layer.extractall(root, filter="data")
    return root


# --------------------------------------------------------------------------- a working sealift

IMPORTS = textwrap.dedent(
    """
    import importlib, json, pkgutil, sys
    site = sys.argv[1]
    assert sys.version_info[:2] == (3, 11), sys.version
    # The C extensions and the clients the prefetch agent needs.
    names = [
        "cryptography.hazmat.bindings._rust", "cryptography.x509", "yaml", "_yaml",
        "rpds", "msgspec", "charset_normalizer", "_cffi_backend", "lightkube",
        "lightkube.models", "boto3", "botocore", "requests", "jsonschema", "click", "tqdm",
        "cyclonedx", "kubernetes_validate",
    ]
    import sealift
    names += [m.name for m in pkgutil.walk_packages(sealift.__path__, "sealift.")]
    for name in names:
        importlib.import_module(name)
    # An S3 client loads botocore's data files: the package is complete, not only importable.
    import boto3
    boto3.session.Session().client(
        "s3", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y"
    )
    # Nothing came from anywhere but the layer and the interpreter's standard library.
    import sysconfig
    allowed = (site, sysconfig.get_path("stdlib"), sysconfig.get_path("platstdlib"))
    assert not any("-packages" in entry for entry in sys.path[1:] if entry != site), sys.path
    outside = sorted(
        name for name, module in list(sys.modules.items())
        if getattr(module, "__file__", None) and not module.__file__.startswith(allowed)
    )
    assert not outside, outside
    print(json.dumps({"imported": len(names), "yaml_c": __import__("yaml").__with_libyaml__}))
    """
)


@pytest.fixture(scope="module")
def image_run(image_root: Path, bundle: Path, tmp_path_factory: pytest.TempPathFactory):
    """Run a command as the image would, with the host's Python 3.11 as its python3."""
    if platform.machine() != "x86_64" or not HOST_PYTHON.exists():
        pytest.skip(f"needs {HOST_PYTHON} on x86_64 (the target is {PLATFORM}, Python {PYTHON})")
    _, config = image(bundle, IMAGE)
    bin_dir = tmp_path_factory.mktemp("bin")
    # python3 in the image is the host's 3.11 with -S: no Debian dist-packages, no site
    # folders; only what the image's PYTHONPATH names can be imported.
    python3 = bin_dir / "python3"
    python3.write_text(f'#!/bin/sh\nexec {HOST_PYTHON} -S "$@"\n')
    python3.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(bin_dir), "LANG": "C.UTF-8"}
    for entry in config["config"]["Env"]:
        name, _, value = entry.partition("=")
        if name == "PYTHONPATH":
            env[name] = ":".join(
                str(image_root) + part if part.startswith("/" + SITE_PACKAGES) else part
                for part in value.split(":")
            )

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv), env=env, capture_output=True, text=True, timeout=300, cwd=bin_dir
        )

    return run


def test_the_entrypoint_runs_sealift(image_run, bundle: Path) -> None:
    _, config = image(bundle, IMAGE)
    entrypoint = config["config"]["Entrypoint"]
    assert entrypoint == list(ENTRYPOINT) and entrypoint[0] == "python3"
    result = image_run(*entrypoint, "--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"sealift, version {__version__}"
    result = image_run(*entrypoint, *config["config"]["Cmd"])
    assert result.returncode == 0, result.stderr
    assert "prefetch" in result.stdout


def test_the_launcher_runs_the_prefetch_agent(image_run, image_root: Path) -> None:
    launcher = image_root / LAUNCHER
    assert launcher.stat().st_mode & 0o111
    result = image_run(str(launcher), "prefetch", "--help")
    assert result.returncode == 0, result.stderr
    assert "Usage: sealift prefetch" in result.stdout
    assert "--source" in result.stdout


def test_every_dependency_imports_from_the_layer_alone(image_run, image_root: Path) -> None:
    site = str(image_root / SITE_PACKAGES)
    result = image_run("python3", "-c", IMPORTS, site)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["imported"] > 60
    assert report["yaml_c"] is True  # PyYAML's C loader: a linux x86_64 wheel


# --------------------------------------------------------------------------- the image


def test_config_and_manifest_add_one_layer_to_the_base(bundle: Path) -> None:
    base_manifest, base_config = image(bundle, BASE)
    manifest, config = image(bundle, IMAGE)
    # The base's layers are shared by digest: stored once, named by both manifests.
    assert [d["digest"] for d in manifest["layers"][:-1]] == [
        d["digest"] for d in base_manifest["layers"]
    ]
    assert len(manifest["layers"]) == len(base_manifest["layers"]) + 1
    assert manifest["layers"][-1]["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip"
    diff_ids = config["rootfs"]["diff_ids"]
    assert diff_ids[:-1] == base_config["rootfs"]["diff_ids"]
    assert len(diff_ids) == len(base_config["rootfs"]["diff_ids"]) + 1
    assert len(config["history"]) == len(base_config["history"]) + 1
    assert (config["os"], config["architecture"]) == ("linux", "amd64")
    env = config["config"]["Env"]
    assert f"PYTHONPATH=/{SITE_PACKAGES}:{BASE_PYTHONPATH}" in env
    assert [e for e in env if e.startswith("PYTHONPATH=")] == [
        f"PYTHONPATH=/{SITE_PACKAGES}:{BASE_PYTHONPATH}"
    ]
    assert "PYTHON_VERSION=3.11.2" in env
    assert config["config"]["Entrypoint"] == list(ENTRYPOINT)
    assert config["created"] == "1970-01-01T00:00:00Z"
    labels = config["config"]["Labels"]
    assert labels["org.opencontainers.image.version"] == __version__
    annotations = manifest["annotations"]
    assert annotations["org.opencontainers.image.base.name"] == BASE
    base_digest = artifact(bundle_manifest(bundle), BASE)["digest"]
    assert annotations["org.opencontainers.image.base.digest"] == base_digest
    entry = artifact(bundle_manifest(bundle), IMAGE)
    assert entry["kind"] == "image"
    assert entry["platforms"] == [PLATFORM]


def test_the_layer_is_reproducible_by_construction(bundle: Path, wheelhouse: Path) -> None:
    manifest, config = image(bundle, IMAGE)
    # Nothing of the build machine: not its Python's path (console scripts name it in their
    # first line and RECORD hashes them), not the wheelhouse's, not a temporary folder's.
    machine = [os.fsencode(p) for p in (sys.executable, Path(sys.executable).resolve())]
    machine += [os.fsencode(wheelhouse), os.fsencode(tempfile.gettempdir()) + b"/sealift-"]
    leaks = []
    with tarfile.open(blob_path(bundle, manifest["layers"][-1]["digest"]), "r:gz") as layer:
        members = layer.getmembers()
        for member in members:
            if member.isfile():
                data = layer.extractfile(member).read()  # type: ignore[union-attr]
                leaks += [member.name for path in machine if path in data]
                if member.name.endswith(".dist-info/RECORD"):
                    # RECORD lists what the layer holds: no scripts outside it.
                    assert b"../" not in data, member.name
    assert not leaks, leaks
    names = [m.name for m in members]
    assert names == sorted(names)
    assert all(m.uid == 0 and m.gid == 0 and m.uname == "" and m.gname == "" for m in members)
    assert all(m.mtime == 0 for m in members)
    assert all(set(m.pax_headers) <= {"path", "linkpath"} for m in members)
    assert all(m.mode in (0o644, 0o755) for m in members)
    assert all(m.isfile() or m.isdir() for m in members)
    assert LAUNCHER in names
    assert f"{SITE_PACKAGES}/sealift/cli.py" in names
    # No console scripts naming the build machine's Python, no byte code of its Python.
    assert not any(n.startswith(f"{SITE_PACKAGES}/bin") for n in names)
    assert not any(n.endswith(".pyc") for n in names)
    gz = blob_path(bundle, manifest["layers"][-1]["digest"]).read_bytes()[:10]
    assert gz[4:8] == b"\0\0\0\0" and not gz[3] & 0x08  # gzip: no time, no file name
    assert len(config["rootfs"]["diff_ids"]) == len(manifest["layers"])


def test_two_builds_give_the_same_digests(bundles: tuple[Path, Path]) -> None:
    directory, tar = bundles
    first, second = bundle_manifest(directory), bundle_manifest(tar)
    assert artifact(first, IMAGE)["digest"] == artifact(second, IMAGE)["digest"]
    assert first["artifacts"] == second["artifacts"]
    for bundle in (directory, tar):
        result = CliRunner().invoke(main, ["bundle", "verify", "-q", str(bundle)])
        assert result.exit_code == 0, result.stderr + result.stdout


def test_the_sbom_lists_the_python_packages_of_the_layer(bundle: Path) -> None:
    sbom_manifest = json.loads(
        blob(bundle, artifact(bundle_manifest(bundle), "sealift/sbom:1.0")["digest"])
    )
    sbom = json.loads(blob(bundle, sbom_manifest["layers"][0]["digest"]))
    component = next(c for c in sbom["components"] if c["name"] == IMAGE)
    found = {(c["name"], c["version"]) for c in component["components"]}
    assert ("sealift", __version__) in found
    assert ("cryptography", "48.0.0") in found
    assert ("boto3", "1.43.11") in found
    assert ("libc6", "2.36-9") in found  # the base's packages too


@pytest.mark.skopeo
def test_skopeo_reads_the_prefetch_image(bundle: Path) -> None:
    reference = f"oci:{bundle}:{IMAGE}"
    inspected = json.loads(
        subprocess.run(
            [SKOPEO_BINARY, "inspect", reference], capture_output=True, check=True, timeout=60
        ).stdout
    )
    assert inspected["Digest"] == artifact(bundle_manifest(bundle), IMAGE)["digest"]
    assert (inspected["Os"], inspected["Architecture"]) == ("linux", "amd64")
    assert f"PYTHONPATH=/{SITE_PACKAGES}:{BASE_PYTHONPATH}" in inspected["Env"]
    config = json.loads(
        subprocess.run(
            [SKOPEO_BINARY, "inspect", "--config", reference],
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout
    )
    assert config["config"]["Entrypoint"] == list(ENTRYPOINT)


# --------------------------------------------------------------------------- bad input


def assert_error(result: Result, output: Path, *names: object) -> str:
    """One ``error: ... (hint: ...)`` line naming every one of ``names``; no finished bundle."""
    assert result.exit_code == EXIT_INPUT, (result.exit_code, result.stderr, result.stdout)
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert "(hint: " in line and line.endswith(")"), line
    for name in names:
        assert str(name) in line, (str(name), line)
    assert not (output / "sealift-bundle.json").exists()
    return line


def test_a_missing_wheelhouse_is_named(tmp_path: Path) -> None:
    bundle_file = write_bundle_file(tmp_path, "./no-wheels")
    line = assert_error(
        create(bundle_file, tmp_path / "out"),
        tmp_path / "out",
        "prefetchImage.wheels",
        tmp_path / "no-wheels",
        "tools/wheelhouse.sh linux/amd64 3.11",
    )
    assert "sealift.yaml" in line


def test_a_wheelhouse_without_this_sealift_is_named(tmp_path: Path) -> None:
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "sealift-0.0.1-py3-none-any.whl").write_bytes(b"an older release")
    bundle_file = write_bundle_file(tmp_path, "./wheels")
    assert_error(
        create(bundle_file, tmp_path / "out"),
        tmp_path / "out",
        "prefetchImage.wheels",
        f"no wheel of sealift {__version__}",
    )


def test_a_dependency_without_a_wheel_names_platform_and_python(
    wheelhouse: Path, tmp_path: Path
) -> None:
    # The default wheelhouse has no sigstore: asking for the extra finds no wheel of it.
    bundle_file = write_bundle_file(tmp_path, wheelhouse, extras=["sigstore"])
    assert_error(
        create(bundle_file, tmp_path / "out"),
        tmp_path / "out",
        "prefetchImage.wheels",
        "no wheel of sigstore==4.5.1",
        "linux/amd64",
        "Python 3.11",
        "WHEELHOUSE_EXTRAS=sigstore tools/wheelhouse.sh linux/amd64 3.11",
    )


def test_wheels_for_another_python_are_refused(wheelhouse: Path, tmp_path: Path) -> None:
    # A base with Python 3.12 and a wheelhouse of cp311 wheels: a compiled dependency is missing.
    folder = tmp_path / "release"
    write_python_base_image(folder / "base", ref_name=BASE, python_version="3.12.3")
    bundle_file = write_bundle_file(folder, wheelhouse, python="3.12")
    assert_error(
        create(bundle_file, tmp_path / "out"),
        tmp_path / "out",
        "prefetchImage.wheels",
        "no wheel of",
        "linux/amd64 and Python 3.12",
        "tools/wheelhouse.sh linux/amd64 3.12",
    )


def test_a_base_that_is_not_listed_is_refused(tmp_path: Path) -> None:
    bundle_file = write_bundle_file(tmp_path, "./wheels", base="python:3.12-slim")
    assert_error(
        create(bundle_file, tmp_path / "out"),
        tmp_path / "out",
        "prefetchImage.base",
        "python:3.12-slim",
        BASE,
    )


def test_a_base_for_another_platform_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "release"
    write_python_base_image(folder / "base", ref_name=BASE, platform=("linux", "arm64"))
    bundle_file = write_bundle_file(folder, "./wheels")
    assert_error(
        create(bundle_file, tmp_path / "out"),
        tmp_path / "out",
        "prefetchImage.base",
        "linux/arm64",
        "linux/amd64",
    )


def test_a_base_with_another_python_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "release"
    write_python_base_image(folder / "base", ref_name=BASE, python_version="3.12.3")
    bundle_file = write_bundle_file(folder, "./wheels")
    assert_error(
        create(bundle_file, tmp_path / "out"),
        tmp_path / "out",
        "prefetchImage.python",
        "3.12.3",
    )


def test_a_platform_without_wheels_is_refused(tmp_path: Path) -> None:
    bundle_file = write_bundle_file(tmp_path, "./wheels", platform="linux/riscv64")
    assert_error(
        create(bundle_file, tmp_path / "out"),
        tmp_path / "out",
        "prefetchImage.platform",
        "linux/riscv64",
    )


def test_an_image_named_like_the_prefetch_image_is_refused(tmp_path: Path) -> None:
    bundle_file = write_bundle_file(tmp_path, "./wheels")
    body = json.loads(bundle_file.read_text())
    body["images"].append({"layout": "./base", "ref": IMAGE})
    bundle_file.write_text(json.dumps(body))
    assert_error(create(bundle_file, tmp_path / "out"), tmp_path / "out", "images[1]", IMAGE)


@pytest.mark.parametrize(
    ("settings", "names"),
    [
        ({"wheel": "./w"}, ["prefetchImage.wheel"]),
        ({"python": "3"}, ["prefetchImage.python"]),
        ({"python": "3.10"}, ["prefetchImage.python", "3.11"]),
        ({"glibc": "2.12"}, ["prefetchImage.glibc"]),
        ({"extras": ["pkcs11"]}, ["prefetchImage.extras"]),
    ],
)
def test_bad_prefetch_settings_name_the_key(
    tmp_path: Path, settings: dict[str, object], names: list[str]
) -> None:
    bundle_file = write_bundle_file(tmp_path, "./wheels", **settings)
    assert_error(create(bundle_file, tmp_path / "out"), tmp_path / "out", *names)
