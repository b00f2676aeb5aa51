#!/usr/bin/env python3
"""Benchmark ``sealift prefetch`` against ``aws s3 cp --recursive`` and boto3's TransferManager.

One run, one moto S3 server on loopback, one 2 GB model (bench/out/weights/model, made by
bench_weights.py if missing) installed into it with ``sealift install --weights``. Then, page
cache warm on the server side, alternating ``--runs`` times, median reported:

* ``sealift prefetch --source s3://.../NAME/1 --dest DIR --trust vendor.pub -j 4``: signatures
  checked, every file hashed while it streams, fsync, atomic publication;
* ``aws s3 cp --recursive`` (awscli in its own venv under bench/out): downloads, verifies nothing;
* boto3 ``TransferManager`` download of every file, no hashing: the same transfer as sealift
  without the verification, to show what hashing costs.

Peak RSS of sealift from /usr/bin/time -v. A benchmark reports, it never asserts; the last
stdout line is a JSON summary, also saved to bench/out/prefetch.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_create as shared
import bench_weights
from support.s3_server import CREDENTIALS, S3Server

WORK = shared.OUT / "prefetch"
AWS = shared.OUT / "awscli-venv" / "bin" / "aws"
BOTO_DOWNLOAD = """
import sys, boto3
from boto3.s3.transfer import TransferConfig
endpoint, bucket, prefix, dest, jobs = sys.argv[1:6]
client = boto3.session.Session().client("s3", endpoint_url=endpoint, region_name="us-east-1")
config = TransferConfig(max_concurrency=int(jobs), multipart_chunksize=64 * 1024 * 1024)
for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
    for item in page.get("Contents", []):
        target = dest + "/" + item["Key"][len(prefix):]
        import os; os.makedirs(os.path.dirname(target), exist_ok=True)
        client.download_file(bucket, item["Key"], target, Config=config)
"""

# sealift's transfer shape (one streaming GET per file, --jobs files at once, written and
# fsynced), with and without hashing: what the verification itself costs.
STREAM_DOWNLOAD = """
import hashlib, os, sys
from concurrent.futures import ThreadPoolExecutor
import boto3
endpoint, bucket, prefix, dest, jobs, hashing = sys.argv[1:7]
client = boto3.session.Session().client("s3", endpoint_url=endpoint, region_name="us-east-1")
keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix=prefix)["Contents"]
        if "/.sealift/" not in o["Key"]]
def one(key):
    target = dest + "/" + key[len(prefix):]
    os.makedirs(os.path.dirname(target), exist_ok=True)
    hasher = hashlib.sha256()
    body = client.get_object(Bucket=bucket, Key=key)["Body"]
    with open(target, "wb") as handle:
        while chunk := body.read(4 << 20):
            handle.write(chunk)
            if hashing == "1":
                hasher.update(chunk)
        handle.flush()
        os.fsync(handle.fileno())
with ThreadPoolExecutor(int(jobs)) as pool:
    list(pool.map(one, sorted(keys)))
"""


def ensure_awscli() -> bool:
    if AWS.exists():
        return True
    venv = AWS.parent.parent
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    done = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "awscli"], check=False)
    return done.returncode == 0 and AWS.exists()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("-j", "--jobs", type=int, default=4)
    args = parser.parse_args()
    bench_weights.WORK.mkdir(parents=True, exist_ok=True)
    size = bench_weights.make_model(2048)
    vendor, pub, _ = bench_weights.keys()
    WORK.mkdir(parents=True, exist_ok=True)
    spec = WORK / "sealift.yaml"
    spec.write_text(
        "apiVersion: sealift.dev/v1alpha1\nkind: Bundle\nmetadata: {name: prefetch, version: '1'}\n"
        f"models:\n  - {{name: bench-model, version: '1', path: {bench_weights.MODEL}}}\n"
    )
    bundle = WORK / "bundle"
    shutil.rmtree(bundle, ignore_errors=True)
    shared.run_measured([str(shared.SEALIFT), "bundle", "create", "-f", str(spec),
                         "-o", str(bundle), "--sign-key", str(vendor), "-q"])  # fmt: skip
    awscli = ensure_awscli()
    os.environ.update(CREDENTIALS)
    # The same parallelism for every side; moto's server stalls under awscli's default of ten
    # concurrent 8 MiB ranged GETs on one key, which would measure moto, not the clients.
    aws_config = WORK / "aws-config"
    aws_config.write_text(
        f"[default]\ns3 =\n  max_concurrent_requests = {args.jobs}\n  multipart_chunksize = 64MB\n"
    )
    os.environ["AWS_CONFIG_FILE"] = str(aws_config)
    lost = {"aws": 0, "boto3": 0, "stream": 0, "stream_hashed": 0}
    runs: dict[str, list[float]] = {
        "sealift": [],
        "aws": [],
        "boto3": [],
        "stream": [],
        "stream_hashed": [],
    }
    peak = 0
    with S3Server() as s3:
        s3.client().create_bucket(Bucket="bench")
        shared.run_measured([str(shared.SEALIFT), "install", str(bundle), "--weights", "s3://bench/llm",
                             "--s3-endpoint", s3.endpoint, "--trust", str(pub), "-q",
                             "--audit-log", str(WORK / "audit.jsonl")])  # fmt: skip
        source = "s3://bench/llm/bench-model/1"
        for _ in range(args.runs):
            dest = WORK / "nvme"
            shared.clear(dest)
            wall, rss, _ = shared.run_measured(
                [str(shared.SEALIFT), "prefetch", "--source", source, "--dest", str(dest),
                 "--s3-endpoint", s3.endpoint, "--trust", str(pub), "-q", "-j", str(args.jobs)],
                WORK / "sealift.time",
            )  # fmt: skip
            runs["sealift"].append(wall)
            peak = max(peak, rss or 0)
            if awscli:
                target = WORK / "aws"
                shared.clear(target)
                try:
                    # moto stalls at times under ranged GETs (awscli, boto3): bound the wait
                    # and count the run as lost rather than hang the whole benchmark.
                    wall, _, _ = shared.run_measured(
                        ["timeout", "120", str(AWS), "s3", "cp", "--recursive", "--quiet",
                         f"{source}/", str(target), "--endpoint-url", s3.endpoint],
                    )  # fmt: skip
                    runs["aws"].append(wall + shared.sync())
                except RuntimeError:
                    lost["aws"] += 1
            target = WORK / "boto3"
            shared.clear(target)
            try:
                wall, _, _ = shared.run_measured(
                    ["timeout", "120", sys.executable, "-c", BOTO_DOWNLOAD, s3.endpoint, "bench",
                     "llm/bench-model/1/", str(target), str(args.jobs)],
                )  # fmt: skip
                runs["boto3"].append(wall + shared.sync())
            except RuntimeError:
                lost["boto3"] += 1
            for side, hashing in (("stream", "0"), ("stream_hashed", "1")):
                target = WORK / side
                shared.clear(target)
                try:
                    wall, _, _ = shared.run_measured(
                        ["timeout", "120", sys.executable, "-c", STREAM_DOWNLOAD, s3.endpoint,
                         "bench", "llm/bench-model/1/", str(target), str(args.jobs), hashing],
                    )  # fmt: skip
                    runs[side].append(wall)
                except RuntimeError:
                    lost[side] += 1
    ours = statistics.median(runs["sealift"])
    aws = statistics.median(runs["aws"]) if runs["aws"] else None
    boto = statistics.median(runs["boto3"]) if runs["boto3"] else float("nan")
    stream = statistics.median(runs["stream"]) if runs["stream"] else float("nan")
    hashed = statistics.median(runs["stream_hashed"]) if runs["stream_hashed"] else float("nan")
    summary = {
        "bench": "prefetch",
        "machine": shared.machine(),
        "bytes": size,
        "runs": args.runs,
        "jobs": args.jobs,
        "sealift_s": round(ours, 3),
        "aws_s3_cp_s": round(aws, 3) if aws else None,
        "boto3_transfer_s": round(boto, 3),
        "ratio_vs_aws": round(ours / aws, 3) if aws else None,
        "ratio_vs_boto3": round(ours / boto, 3),
        "stream_s": round(stream, 3),
        "stream_hashed_s": round(hashed, 3),
        "hashing_overhead": round(hashed / stream - 1, 3),
        "sealift_peak_rss_mib": round(peak / 1024, 1),
        "lost_runs": lost,
        "all_runs": runs,
    }
    print(f"model {size / 1e9:.2f} GB from moto S3 on loopback, median of {args.runs}")
    print(f"  sealift prefetch (verified, fsync, atomic): {ours:.2f}s")
    if aws:
        print(f"  aws s3 cp --recursive + sync (no checks)  : {aws:.2f}s  ratio {ours / aws:.2f}x")
    print(f"  boto3 TransferManager + sync (no checks)  : {boto:.2f}s  ratio {ours / boto:.2f}x")
    print(f"  same transfer shape, no hashing           : {stream:.2f}s")
    print(
        f"  same transfer shape, hashed               : {hashed:.2f}s"
        f"  (+{100 * (hashed / stream - 1):.0f}%, target <= 10%)"
    )
    print(f"  sealift peak RSS                          : {peak / 1024:.1f} MiB")
    (shared.OUT / "prefetch.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "all_runs"}, sort_keys=True))


if __name__ == "__main__":
    main()
