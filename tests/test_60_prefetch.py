"""sealift prefetch from a real S3 API (moto) to a node's disk: verified, atomic, resumable."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from click.testing import CliRunner, Result
from support.content import write_model_folder
from support.fault_proxy import FaultProxy
from support.pki import write_key_pair
from support.registry_server import free_port
from support.s3_server import CREDENTIALS, S3Server, moto_server_binary
from support.slow_proxy import SlowProxy

from sealift.cli import main

SEALIFT = str(Path(sys.executable).with_name("sealift"))
NAME = "tiny-llm"


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    if moto_server_binary() is None:
        pytest.skip("moto_server not installed")
    with S3Server() as server:
        yield server


@pytest.fixture(autouse=True)
def _work_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def env() -> dict[str, str]:
    return {**CREDENTIALS, "AWS_ENDPOINT_URL": ""}


def publish(
    root: Path, s3: S3Server, bucket: str, version: str, *, seed: int = 1, shard: int = 3 << 20
) -> dict:
    """A signed model version installed into the store, as sealift install leaves it."""
    keys = write_key_pair(root, "vendor") if not (root / "vendor.key").exists() else None
    del keys
    model = root / f"model-{version}"
    write_model_folder(model, shards=2, shard_size=shard, seed=seed)
    spec = root / f"sealift-{version}.yaml"
    spec.write_text(
        "apiVersion: sealift.dev/v1alpha1\nkind: Bundle\n"
        f"metadata: {{name: tiny, version: '{version}'}}\n"
        f"models:\n  - {{name: {NAME}, version: '{version}', path: ./model-{version}}}\n"
    )
    bundle = root / f"bundle-{version}"
    created = CliRunner().invoke(
        main,
        [
            "bundle",
            "create",
            "-f",
            str(spec),
            "-o",
            str(bundle),
            "-q",
            "--sign-key",
            str(root / "vendor.key"),
        ],
    )
    assert created.exit_code == 0, created.stderr
    installed = CliRunner().invoke(
        main,
        ["install", str(bundle), "--weights", f"s3://{bucket}/llm", "--s3-endpoint", s3.endpoint,
         "--trust", str(root / "vendor.pub"), "-q", "--audit-log", str(root / "audit.jsonl")],
        env=env(),
    )  # fmt: skip
    assert installed.exit_code == 0, installed.stderr
    return {
        "model": model,
        "source": f"s3://{bucket}/llm/{NAME}/{version}",
        "pub": root / "vendor.pub",
    }


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory, s3: S3Server) -> dict:
    root = tmp_path_factory.mktemp("published")
    s3.client().create_bucket(Bucket="weights")
    return publish(root, s3, "weights", "1")


def run(source: str, dest: Path, endpoint: str, *extra: str) -> Result:
    return CliRunner().invoke(
        main,
        [
            "prefetch",
            "--source",
            source,
            "--dest",
            str(dest),
            "--s3-endpoint",
            endpoint,
            "-q",
            "--json",
            *extra,
        ],
        env=env(),
    )


def same_files(copy: Path, model: Path) -> bool:
    def digests(root: Path) -> dict[str, str]:
        return {
            p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in root.rglob("*")
            if p.is_file() and p.name != "READY"
        }

    return digests(copy) == digests(model)


def test_prefetch_lands_a_verified_copy_and_a_rerun_fetches_nothing(
    published: dict, s3: S3Server, tmp_path: Path
) -> None:
    dest = tmp_path / "nvme"
    result = run(published["source"], dest, s3.endpoint, "--trust", str(published["pub"]))
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    current = dest / NAME / "current"
    assert current.is_symlink() and Path(report["path"]) == dest / NAME / os.readlink(current)
    assert same_files(current, published["model"])
    ready = json.loads((current / "READY").read_text())
    assert ready["manifestDigest"] == report["manifestDigest"] and "vendor.pub" in ready["signers"]
    assert not list((dest / ".staging").glob("*"))
    again = json.loads(
        run(published["source"], dest, s3.endpoint, "--trust", str(published["pub"])).stdout
    )
    assert again["bytesFetched"] == 0


def test_an_untrusted_signer_fetches_nothing(published: dict, s3: S3Server, tmp_path: Path) -> None:
    other = write_key_pair(tmp_path, "other")
    dest = tmp_path / "nvme"
    result = run(published["source"], dest, s3.endpoint, "--trust", str(other.public))
    assert result.exit_code == 3 and "not signed as" in result.stderr and "hint:" in result.stderr
    assert not (dest / NAME).exists()
    assert not any(p.is_file() for p in dest.rglob("*")) if dest.exists() else True


def test_a_tampered_object_is_refused_and_nothing_appears(s3: S3Server, tmp_path: Path) -> None:
    s3.client().create_bucket(Bucket="tampered")
    version = publish(tmp_path, s3, "tampered", "1", shard=256 * 1024)
    key = f"llm/{NAME}/1/model-00001-of-00002.safetensors"
    body = bytearray(s3.client().get_object(Bucket="tampered", Key=key)["Body"].read())
    body[-1] ^= 0xFF
    s3.client().put_object(Bucket="tampered", Key=key, Body=bytes(body))
    dest = tmp_path / "nvme"
    result = run(version["source"], dest, s3.endpoint, "--trust", str(version["pub"]))
    assert result.exit_code == 3, result.stderr
    assert "model-00001-of-00002.safetensors" in result.stderr and "hint:" in result.stderr
    assert not (dest / NAME).exists()


def test_a_filesystem_too_small_is_refused_before_any_download(
    published: dict, s3: S3Server, tmp_path: Path
) -> None:
    small = tmp_path / "small"
    small.mkdir()
    if subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(small)], check=False
    ).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        result = run(published["source"], small, s3.endpoint, "--trust", str(published["pub"]))
        assert result.exit_code == 5, result.stderr
        assert "bytes free" in result.stderr and "hint:" in result.stderr
        assert sum(p.stat().st_size for p in small.rglob("*") if p.is_file()) == 0
    finally:
        subprocess.run(["umount", str(small)], check=False)


def test_dropped_connections_and_server_errors_are_retried(
    published: dict, s3: S3Server, tmp_path: Path
) -> None:
    with FaultProxy(s3.endpoint.removeprefix("http://"), seed=5, rate=0.7, budget=12) as proxy:
        result = run(
            published["source"], tmp_path / "nvme", f"http://{proxy.host}",
            "--trust", str(published["pub"]), "--s3-path-style",
        )  # fmt: skip
        assert result.exit_code == 0, result.stderr
        assert len(proxy.injected) >= 3
    assert same_files(tmp_path / "nvme" / NAME / "current", published["model"])


def test_a_store_that_keeps_failing_ends_in_a_clear_error(
    published: dict, s3: S3Server, tmp_path: Path
) -> None:
    with FaultProxy(s3.endpoint.removeprefix("http://"), seed=2, rate=1.0, budget=10_000) as proxy:
        result = run(
            published["source"], tmp_path / "nvme", f"http://{proxy.host}",
            "--trust", str(published["pub"]), "--s3-path-style",
        )  # fmt: skip
    assert result.exit_code in (3, 4), result.stderr
    assert len([line for line in result.stderr.splitlines() if line.startswith("error:")]) == 1
    assert not (tmp_path / "nvme" / NAME).exists()


@pytest.mark.parametrize("kill_after", [0.4, 1.0, 1.8])
def test_kill_9_leaves_nothing_or_a_complete_copy_and_a_rerun_resumes(
    published: dict, s3: S3Server, tmp_path: Path, kill_after: float
) -> None:
    dest = tmp_path / "nvme"
    with SlowProxy(s3.endpoint.removeprefix("http://"), rate=3 * 1024 * 1024) as proxy:
        process = subprocess.Popen(
            [SEALIFT, "prefetch", "--source", published["source"], "--dest", str(dest),
             "--s3-endpoint", f"http://{proxy.host}", "--s3-path-style",
             "--trust", str(published["pub"]), "-q"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **env()},
        )  # fmt: skip
        time.sleep(kill_after)
        process.send_signal(signal.SIGKILL)
        process.wait()
    final = dest / NAME
    if final.exists():
        # Either nothing is visible, or all of it, verified.
        assert same_files(final / "current", published["model"])
    result = run(published["source"], dest, s3.endpoint, "--trust", str(published["pub"]))
    assert result.exit_code == 0, result.stderr
    assert same_files(final / "current", published["model"])


def test_serve_reports_ready_only_once_the_copy_is_in_place(
    published: dict, s3: S3Server, tmp_path: Path
) -> None:
    port = free_port()
    with SlowProxy(s3.endpoint.removeprefix("http://"), rate=4 * 1024 * 1024) as proxy:
        process = subprocess.Popen(
            [SEALIFT, "prefetch", "--source", published["source"], "--dest", str(tmp_path / "nvme"),
             "--s3-endpoint", f"http://{proxy.host}", "--s3-path-style",
             "--trust", str(published["pub"]), "-q", "--serve", f"127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, **env()},
        )  # fmt: skip
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                try:
                    first = requests.get(f"{url}/readyz", timeout=1, proxies={"http": ""})
                    break
                except requests.ConnectionError:
                    time.sleep(0.05)
            assert first.status_code == 503
            assert requests.get(f"{url}/livez", timeout=1, proxies={"http": ""}).status_code == 200
            deadline = time.monotonic() + 60
            while requests.get(f"{url}/readyz", timeout=1, proxies={"http": ""}).status_code != 200:
                assert time.monotonic() < deadline, "never became ready"
                time.sleep(0.1)
            metrics = requests.get(f"{url}/metrics", timeout=1, proxies={"http": ""}).text
            assert "sealift_prefetch_ready 1" in metrics
            assert process.poll() is None, "the agent must keep running once ready"
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=10)
    assert process.returncode == 0


def test_a_new_version_replaces_current_and_old_ones_go(s3: S3Server, tmp_path: Path) -> None:
    s3.client().create_bucket(Bucket="versions")
    dest = tmp_path / "nvme"
    paths = []
    for number in ("1", "2", "3"):
        version = publish(tmp_path, s3, "versions", number, seed=int(number), shard=64 * 1024)
        result = run(
            version["source"], dest, s3.endpoint, "--trust", str(version["pub"]), "--keep", "2"
        )
        assert result.exit_code == 0, result.stderr
        paths.append(Path(json.loads(result.stdout)["path"]))
        assert (dest / NAME / "current").resolve() == paths[-1].resolve()
    assert paths[2].exists() and paths[1].exists() and not paths[0].exists()
    shutil.rmtree(dest)
