#!/usr/bin/env python3
"""Benchmark ``sealift weights verify`` and ``resign`` against ``model_signing verify``, in one run.

Makes a ~2 GB model folder of safetensors-like shards in bench/out/weights/, signs it once with
each tool, then alternates (page cache warm, ``--runs`` times, median reported):

* ``sealift weights verify DIR --trust pub.pem --signature DIR.sig -j 2``
* ``model_signing verify key DIR --signature DIR.ms.sig --public_key pub.pem`` (the pinned
  reference implementation, which also hashes every file);

and, on a bundle made from the same folder with ``bundle create --sign-key``:

* ``sealift weights verify BUNDLE --trust vendor.pub`` against ``sealift weights resign BUNDLE
  --trust vendor.pub --key customer.key`` (resign must cost about one verification).

A benchmark reports, it never asserts: the last stdout line is a JSON summary, also saved to
bench/out/weights.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_create as shared

WORK = shared.OUT / "weights"
MODEL = WORK / "model"
MODEL_SIGNING = shared.REPO / ".venv" / "bin" / "model_signing"
MIB = 1024 * 1024


def make_model(total_mib: int) -> int:
    """Shards of pseudo-random bytes plus the small files of a HF model folder; bytes written."""
    if (MODEL / "config.json").is_file():
        return sum(p.stat().st_size for p in MODEL.iterdir())
    MODEL.mkdir(parents=True, exist_ok=True)
    shards = 8
    per_shard = total_mib * MIB // shards
    block = hashlib.shake_256(b"sealift-bench").digest(4 * MIB)
    for number in range(1, shards + 1):
        path = MODEL / f"model-{number:05d}-of-{shards:05d}.safetensors"
        with path.open("wb") as handle:
            written = 0
            while written < per_shard:
                # Vary each block so no layer of the stack can deduplicate or compress it.
                chunk = hashlib.sha256(f"{number}:{written}".encode()).digest() + block[32:]
                handle.write(chunk[: per_shard - written])
                written += len(chunk[: per_shard - written])
    for name in ("config.json", "tokenizer.json", "generation_config.json"):
        (MODEL / name).write_text(json.dumps({"name": name, "bench": True}))
    return sum(p.stat().st_size for p in MODEL.iterdir())


def keys() -> tuple[Path, Path, Path]:
    """A vendor key pair (P-256) and a customer key (P-384)."""
    vendor, pub, customer = WORK / "vendor.key", WORK / "vendor.pub", WORK / "customer.key"
    if not vendor.exists():
        subprocess.run(
            ["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(vendor)],
            check=True,
        )
        subprocess.run(
            ["openssl", "ec", "-in", str(vendor), "-pubout", "-out", str(pub)],
            check=True,
            capture_output=True,
        )
        subprocess.run(
            [
                "openssl",
                "ecparam",
                "-name",
                "secp384r1",
                "-genkey",
                "-noout",
                "-out",
                str(customer),
            ],
            check=True,
        )
    return vendor, pub, customer


def timed(cmd: list[str]) -> float:
    wall, _, _ = shared.run_measured([str(c) for c in cmd])
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-mib", type=int, default=2048)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    size = make_model(args.model_mib)
    vendor, pub, customer = keys()
    ours, theirs = WORK / "model.sig", WORK / "model.ms.sig"
    for stale in (ours, theirs):
        stale.unlink(missing_ok=True)
    timed([shared.SEALIFT, "weights", "sign", MODEL, "--key", vendor, "--signature", ours, "-q"])
    timed([MODEL_SIGNING, "sign", "key", MODEL, "--private_key", vendor, "--signature", theirs])
    spec = WORK / "sealift.yaml"
    spec.write_text(
        "apiVersion: sealift.dev/v1alpha1\nkind: Bundle\nmetadata: {name: bench, version: '1'}\n"
        f"models:\n  - {{name: bench-model, version: '1', path: {MODEL}}}\n"
    )
    shared.warm_cache(MODEL)
    folder_runs: dict[str, list[float]] = {"sealift": [], "model_signing": []}
    bundle_runs: dict[str, list[float]] = {"verify": [], "resign": []}
    for _ in range(args.runs):
        folder_runs["sealift"].append(
            timed(
                [
                    shared.SEALIFT,
                    "weights",
                    "verify",
                    MODEL,
                    "--trust",
                    pub,
                    "--signature",
                    ours,
                    "-q",
                    "-j",
                    "2",
                ]
            )
        )
        folder_runs["model_signing"].append(
            timed(
                [MODEL_SIGNING, "verify", "key", MODEL, "--signature", theirs, "--public_key", pub]
            )
        )
        bundle = WORK / "bundle"
        shared.clear(bundle)
        timed(
            [
                shared.SEALIFT,
                "bundle",
                "create",
                "-f",
                spec,
                "-o",
                bundle,
                "--sign-key",
                vendor,
                "-q",
            ]
        )
        shared.warm_cache(bundle)
        bundle_runs["verify"].append(
            timed([shared.SEALIFT, "weights", "verify", bundle, "--trust", pub, "-q", "-j", "2"])
        )
        bundle_runs["resign"].append(
            timed(
                [
                    shared.SEALIFT,
                    "weights",
                    "resign",
                    bundle,
                    "--trust",
                    pub,
                    "--key",
                    customer,
                    "-q",
                    "-j",
                    "2",
                ]
            )
        )
    ours_s = statistics.median(folder_runs["sealift"])
    ref_s = statistics.median(folder_runs["model_signing"])
    verify_s = statistics.median(bundle_runs["verify"])
    resign_s = statistics.median(bundle_runs["resign"])
    summary = {
        "bench": "weights",
        "machine": shared.machine(),
        "bytes": size,
        "runs": args.runs,
        "sealift_verify_s": round(ours_s, 3),
        "model_signing_verify_s": round(ref_s, 3),
        "throughput_ratio": round(ref_s / ours_s, 3),
        "bundle_verify_s": round(verify_s, 3),
        "bundle_resign_s": round(resign_s, 3),
        "resign_over_verify": round(resign_s / verify_s, 3),
        "all_runs": {"folder": folder_runs, "bundle": bundle_runs},
    }
    print(f"model folder {size / 1e9:.2f} GB, median of {args.runs}")
    print(f"  sealift weights verify -j 2 : {ours_s:.2f}s ({size / ours_s / 1e6:.0f} MB/s)")
    print(f"  model_signing verify key    : {ref_s:.2f}s ({size / ref_s / 1e6:.0f} MB/s)")
    print(f"  throughput ratio sealift/ref: {ref_s / ours_s:.2f}x (target >= 1.0x)")
    print(
        f"  bundle: verify {verify_s:.2f}s, resign {resign_s:.2f}s,"
        f" ratio {resign_s / verify_s:.2f}x (target <= 1.1x)"
    )
    (shared.OUT / "weights.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "all_runs"}, sort_keys=True))
    shutil.rmtree(WORK / "bundle", ignore_errors=True)


if __name__ == "__main__":
    main()
