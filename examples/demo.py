"""`make demo`: the main job end to end on small local data.

Starts Debian's docker-registry on loopback, generates a small vendor release (a multi-arch
vLLM-like image, the operator image, a layout, two archives, two charts, a model and a CA file),
then runs what a release engineer and a customer would run: create a directory bundle and a split
tar, verify both, inspect one. Everything stays on this machine under ./demo-out.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from support.registry_server import RegistryServer  # noqa: E402 - after the path set-up
from support.release import make_release  # noqa: E402

OUT = ROOT / "demo-out"
SEALIFT = str(Path(sys.executable).with_name("sealift"))


def step(title: str, *args: str) -> None:
    """Show and run one sealift command; stop the demo if it fails."""
    print(f"\n$ sealift {' '.join(args)}    # {title}", flush=True)
    subprocess.run([SEALIFT, *args], check=True)


def main() -> None:
    """Run the demo."""
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir()
    with RegistryServer(work_dir=OUT / "registry") as registry:
        print(f"local registry on {registry.url}; generating a small vendor release ...")
        release = make_release(OUT / "release", registry.host, shard_size=8 * 1024 * 1024)
        print(f"bundle file: {release.bundle_file}")
        print(release.bundle_file.read_text())
        common = ["-f", str(release.bundle_file), "--plain-http", registry.host]
        step(
            "vendor: build a directory bundle",
            "bundle",
            "create",
            *common,
            "-o",
            str(OUT / "llama70b-2026.12"),
        )
        step(
            "vendor: the same bundle as a tar cut into parts for transfer media",
            "bundle", "create", *common, "-o", str(OUT / "llama70b.tar"), "--split", "8MiB",
        )  # fmt: skip
    step(
        "customer: verify every hash, reading the parts in place",
        "bundle",
        "verify",
        str(OUT / "llama70b.tar.000"),
        "--parts",
    )
    step("customer: verify the directory form", "bundle", "verify", str(OUT / "llama70b-2026.12"))
    step("anyone: what is in it", "bundle", "inspect", str(OUT / "llama70b.tar"))
    print(f"\ndemo finished: bundles are in {OUT}")


if __name__ == "__main__":
    main()
