"""The prefetch image: sealift's layer built by `bundle create`, against doing it by hand.

sealift: `bundle create` of a bundle file holding only a Python base image (a small generated
stand-in) and `prefetchImage` on it, so the time is the layer build: an offline pip install
from the wheelhouse for the target platform, a reproducible tar (fixed order, owners, times),
gzip and both digests while the bytes move, the config and manifest, and the bundle around them.

peer: what an engineer would script instead, with no reproducibility and no bundle: the same
offline `pip install --target` from the same wheelhouse, then `tar czf` of the result, then
`sha256sum` of the tarball (the diff_id of the uncompressed tar is left out, so the peer does
less than sealift). Both run on the same wheelhouse (`make wheelhouse`), interleaved, warm.
Reports medians and the ratio; asserts nothing; the last line is JSON (out/prefetch_image.json).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_create as shared
from support.content import write_python_base_image

from sealift import __version__
from sealift.bundles.prefetch_image import pip_platform_tags

OUT = shared.REPO / "bench" / "out"
WHEELS = shared.REPO / ".cache" / "wheelhouse-linux-amd64-py3.11"
BASE = "python/base:3.11"


def sealift_run(work: Path) -> tuple[float, int | None, int]:
    """One bundle create with the prefetch image; (seconds, peak RSS KiB, layer bytes)."""
    bundle_file = work / "sealift.yaml"
    if not bundle_file.exists():
        write_python_base_image(work / "base", ref_name=BASE)
        bundle_file.write_text(
            json.dumps(
                {
                    "apiVersion": "sealift.dev/v1alpha1",
                    "kind": "Bundle",
                    "metadata": {"name": "bench", "version": "1"},
                    "images": [{"layout": "./base", "ref": BASE}],
                    "prefetchImage": {"base": BASE, "wheels": str(WHEELS), "python": "3.11"},
                }
            )
        )
    out = work / "bundle"
    shutil.rmtree(out, ignore_errors=True)
    cmd = [str(shared.SEALIFT), "bundle", "create", "-f", str(bundle_file), "-o", str(out), "-q"]
    wall, rss, _ = shared.run_measured(cmd, work / "rss.txt")
    blobs = out / "blobs" / "sha256"
    layer = max(p.stat().st_size for p in blobs.iterdir())
    return wall, rss, layer


def peer_run(work: Path) -> tuple[float, int]:
    """pip install --target + tar czf + sha256sum; (seconds, tarball bytes)."""
    target = work / "peer-site"
    shutil.rmtree(target, ignore_errors=True)
    platforms = [
        arg for tag in pip_platform_tags("linux/amd64", "2.28") for arg in ("--platform", tag)
    ]
    pip = [sys.executable, "-m", "pip", "install", "--isolated", "--no-index", "--find-links",
           str(WHEELS), "--target", str(target), *platforms, "--python-version", "3.11",
           "--implementation", "cp", "--only-binary=:all:", "--no-compile", "-q",
           f"sealift=={__version__}"]  # fmt: skip
    tarball = work / "peer.tar.gz"
    started = time.perf_counter()
    subprocess.run(pip, check=True, capture_output=True)
    subprocess.run(["tar", "czf", str(tarball), "-C", str(target), "."], check=True)
    subprocess.run(["sha256sum", str(tarball)], check=True, capture_output=True)
    return time.perf_counter() - started, tarball.stat().st_size


def main() -> None:
    """Run the comparison and print the summary and the JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    if not any(WHEELS.glob("sealift-*.whl")):
        print(f"no wheelhouse at {WHEELS}: run `make wheelhouse` first; nothing measured")
        return
    OUT.mkdir(parents=True, exist_ok=True)
    ours: list[float] = []
    theirs: list[float] = []
    rss: list[int] = []
    layer = tarball = 0
    with tempfile.TemporaryDirectory(prefix="bench-prefetch-image-", dir=OUT) as scratch:
        work = Path(scratch)
        for _ in range(args.runs):
            seconds, peak, layer = sealift_run(work)
            ours.append(seconds)
            rss.append(peak or 0)
            seconds, tarball = peer_run(work)
            theirs.append(seconds)
    result = {
        "machine": shared.machine(),
        "runs": args.runs,
        "sealift_seconds": round(statistics.median(ours), 2),
        "peer_seconds": round(statistics.median(theirs), 2),
        "ratio": round(statistics.median(ours) / statistics.median(theirs), 2),
        "sealift_layer_bytes": layer,
        "peer_tarball_bytes": tarball,
        "sealift_peak_rss_mib": round(max(rss) / 1024, 1),
        "all_sealift": [round(x, 2) for x in ours],
        "all_peer": [round(x, 2) for x in theirs],
    }
    print(
        f"prefetch image: sealift {result['sealift_seconds']} s (layer {layer} bytes, peak RSS"
        f" {result['sealift_peak_rss_mib']} MiB) vs pip --target + tar czf + sha256sum"
        f" {result['peer_seconds']} s ({tarball} bytes): {result['ratio']}x"
    )
    line = json.dumps(result, sort_keys=True)
    (OUT / "prefetch_image.json").write_text(line + "\n")
    print(line)


if __name__ == "__main__":
    main()
