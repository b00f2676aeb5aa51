"""An interrupted create (kill -9) re-runs, reuses what is durable and ends byte-identical."""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.content import push_layout_to_registry, write_model_folder, write_oci_image_layout
from support.registry_server import RegistryServer
from support.slow_proxy import SlowProxy

SEALIFT = str(Path(sys.executable).with_name("sealift"))
LAYER_BYTES = 3 * 1024 * 1024

pytestmark = [pytest.mark.registry, pytest.mark.skopeo]


@pytest.fixture(scope="module")
def slow_registry(
    registry: RegistryServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The test registry holding one image of incompressible layers, behind a slow proxy."""
    layout = tmp_path_factory.mktemp("layers")
    layers = [
        {f"data/{n}.bin": hashlib.shake_256(f"layer{n}".encode()).digest(LAYER_BYTES)}
        for n in range(6)
    ]
    write_oci_image_layout(layout, ref_name="big", layers=layers)
    push_layout_to_registry(layout, "big", registry.host, "resume/big:1")
    with SlowProxy(registry.host, rate=12 * 1024 * 1024) as proxy:
        yield proxy.host


def bundle_file(root: Path, registry_host: str) -> Path:
    write_model_folder(root / "model", shards=2, shard_size=2 * 1024 * 1024, seed=7)
    path = root / "sealift.yaml"
    path.write_text(
        "apiVersion: sealift.dev/v1alpha1\nkind: Bundle\nmetadata: {name: resume, version: '1'}\n"
        f"images:\n  - ref: {registry_host}/resume/big:1\n"
        "models:\n  - {name: m, version: '1', path: ./model}\n"
    )
    return path


def create(spec: Path, output: Path, *extra: str) -> dict:
    host = spec.read_text().split("ref: ", 1)[1].split("/", 1)[0]
    done = subprocess.run(
        [
            SEALIFT,
            "bundle",
            "create",
            "-f",
            str(spec),
            "-o",
            str(output),
            "--json",
            "-q",
            "-j",
            "1",
            "--plain-http",
            host,
            *extra,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def kill_when(spec: Path, output: Path, ready: Callable[[], bool], *extra: str) -> None:
    """Start a create and kill -9 it as soon as ``ready()`` sees durable progress."""
    host = spec.read_text().split("ref: ", 1)[1].split("/", 1)[0]
    process = subprocess.Popen(
        [
            SEALIFT,
            "bundle",
            "create",
            "-f",
            str(spec),
            "-o",
            str(output),
            "-q",
            "-j",
            "1",
            "--plain-http",
            host,
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while not ready() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.wait()


def digests(paths: list[Path]) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}


def test_split_tar_create_resumes_after_kill(tmp_path: Path, slow_registry: str) -> None:
    spec = bundle_file(tmp_path, slow_registry)
    clean = tmp_path / "clean"
    clean.mkdir()
    create(spec, clean / "b.tar", "--split", "4MiB")
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    kill_when(spec, resumed / "b.tar", lambda: (resumed / "b.tar.002").exists(), "--split", "4MiB")
    assert not (resumed / "b.tar.parts.json").exists(), "killed run must not look complete"
    assert (resumed / "b.tar.journal.json").exists()
    result = create(spec, resumed / "b.tar", "--split", "4MiB")
    assert result["bytesReused"] >= 2 * LAYER_BYTES
    assert not (resumed / "b.tar.journal.json").exists()
    assert digests(sorted(resumed.glob("b.tar*"))) == digests(sorted(clean.glob("b.tar*")))


def test_single_tar_create_resumes_after_kill(tmp_path: Path, slow_registry: str) -> None:
    spec = bundle_file(tmp_path, slow_registry)
    create(spec, tmp_path / "clean.tar")
    journal = tmp_path / "b.tar.journal.json"

    def durable() -> bool:
        try:
            return json.loads(journal.read_text())["offset"] > 12 * 1024 * 1024
        except (OSError, ValueError):
            return False

    kill_when(spec, tmp_path / "b.tar", durable)
    assert not (tmp_path / "b.tar").exists()
    result = create(spec, tmp_path / "b.tar")
    assert result["bytesReused"] > 0
    assert (tmp_path / "b.tar").read_bytes() == (tmp_path / "clean.tar").read_bytes()


def test_directory_create_resumes_after_kill(tmp_path: Path, slow_registry: str) -> None:
    spec = bundle_file(tmp_path, slow_registry)
    out = tmp_path / "b"
    blobs = out / "blobs" / "sha256"
    kill_when(spec, out, lambda: blobs.is_dir() and len(list(blobs.iterdir())) >= 2)
    assert not (out / "sealift-bundle.json").exists()
    result = create(spec, out)
    assert result["bytesReused"] > 0
    create(spec, tmp_path / "clean")
    for name in ("sealift-bundle.json", "index.json"):
        assert (out / name).read_bytes() == (tmp_path / "clean" / name).read_bytes()
    assert not (out / ".sealift-work").exists()


def test_a_changed_input_is_not_resumed_silently(tmp_path: Path, slow_registry: str) -> None:
    spec = bundle_file(tmp_path, slow_registry)
    out = tmp_path / "b.tar"
    kill_when(spec, out, lambda: (tmp_path / "b.tar.001").exists(), "--split", "4MiB")
    # Another part size makes other parts: the journal refuses to mix them.
    done = subprocess.run(
        [
            SEALIFT,
            "bundle",
            "create",
            "-f",
            str(spec),
            "-o",
            str(out),
            "--split",
            "5MiB",
            "--plain-http",
            slow_registry,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert "different inputs" in done.stderr and "hint:" in done.stderr


def test_resumed_directory_create_does_not_rehash_finished_model_files(
    tmp_path: Path, slow_registry: str
) -> None:
    spec = bundle_file(tmp_path, slow_registry)
    out = tmp_path / "b"
    cache = out / ".sealift-work" / "source-digests.json"

    def models_done() -> bool:
        try:
            return len(json.loads(cache.read_text())) >= len(list((tmp_path / "model").iterdir()))
        except (OSError, ValueError):
            return False

    kill_when(spec, out, models_done)
    model_bytes = sum(p.stat().st_size for p in (tmp_path / "model").iterdir())
    result = create(spec, out)
    assert result["bytesReused"] >= model_bytes
    assert not cache.exists()
