"""sealift prefetch from a registry: the model artifact and signatures install pushed there."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from support.content import write_model_folder
from support.pki import write_key_pair
from support.registry_server import RegistryServer
from support.slow_proxy import SlowProxy

from sealift.cli import main

pytestmark = [pytest.mark.registry]
SEALIFT = str(Path(sys.executable).with_name("sealift"))


def pushed(root: Path, registry: RegistryServer, prefix: str, *, sign: bool = True) -> dict:
    """A (signed) one-model bundle pushed to the registry with its model and signatures."""
    keys = write_key_pair(root, "vendor")
    write_model_folder(root / "model", shards=2, shard_size=2 << 20, seed=9)
    spec = root / "sealift.yaml"
    spec.write_text(
        "apiVersion: sealift.dev/v1alpha1\nkind: Bundle\nmetadata: {name: r, version: '1'}\n"
        "models:\n  - {name: m, version: '3', path: ./model}\n"
    )
    args = ["bundle", "create", "-f", str(spec), "-o", str(root / "bundle"), "-q"]
    if sign:
        args += ["--sign-key", str(keys.key)]
    assert CliRunner().invoke(main, args).exit_code == 0
    result = CliRunner().invoke(
        main,
        ["install", str(root / "bundle"), "--registry", f"{registry.host}/{prefix}", "--insecure",
         "--push-models", "-q", "--audit-log", str(root / "audit.jsonl")],
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    return {"pub": keys.public, "model": root / "model", "source": f"{prefix}/models/m:3"}


def prefetch(host: str, source: str, dest: Path, pub: Path) -> Result:
    return CliRunner().invoke(
        main,
        ["prefetch", "--source", f"oci://{host}/{source}", "--insecure", "--dest", str(dest),
         "--trust", str(pub), "-q"],
    )  # fmt: skip


def same_files(copy: Path, model: Path) -> bool:
    def digests(root: Path) -> dict[str, str]:
        return {
            p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in root.rglob("*")
            if p.is_file() and p.name != "READY"
        }

    return digests(copy) == digests(model)


def test_prefetch_from_the_registry_lands_a_verified_copy(
    registry: RegistryServer, tmp_path: Path
) -> None:
    source = pushed(tmp_path, registry, "oci-ok")
    result = prefetch(registry.host, source["source"], tmp_path / "nvme", source["pub"])
    assert result.exit_code == 0, result.stderr
    assert same_files(tmp_path / "nvme" / "m" / "current", source["model"])


def test_an_unsigned_model_in_the_registry_is_not_fetched(
    registry: RegistryServer, tmp_path: Path
) -> None:
    source = pushed(tmp_path, registry, "oci-unsigned", sign=False)
    result = prefetch(registry.host, source["source"], tmp_path / "nvme", source["pub"])
    assert result.exit_code == 3 and "not signed as" in result.stderr
    assert not (tmp_path / "nvme" / "m").exists()


def test_a_killed_registry_prefetch_resumes_by_range(
    registry: RegistryServer, tmp_path: Path
) -> None:
    source = pushed(tmp_path, registry, "oci-resume")
    dest = tmp_path / "nvme"
    with SlowProxy(registry.host, rate=1024 * 1024) as proxy:
        process = subprocess.Popen(
            [SEALIFT, "prefetch", "--source", f"oci://{proxy.host}/{source['source']}",
             "--insecure", "--dest", str(dest), "--trust", str(source["pub"]), "-q", "-j", "1"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ),
        )  # fmt: skip
        # Kill it once it has staged some bytes (start-up time varies with the machine's load).
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(
            p.stat().st_size > 0 for p in (dest / ".staging").rglob("*.safetensors")
        ):
            time.sleep(0.1)
        time.sleep(0.3)
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert not (dest / "m").exists() or same_files(dest / "m" / "current", source["model"])
    staged = sum(p.stat().st_size for p in (dest / ".staging").rglob("*.safetensors"))
    result = prefetch(registry.host, source["source"], dest, source["pub"])
    assert result.exit_code == 0, result.stderr
    assert same_files(dest / "m" / "current", source["model"])
    assert staged > 0  # the killed run had fetched part of it, which the re-run kept
