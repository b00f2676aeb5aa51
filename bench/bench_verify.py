#!/usr/bin/env python3
"""Benchmark ``sealift bundle verify`` against the machine's hashing limit, in one run.

Reads the bundles bench_create.py left in bench/out/runs/ (makes them first when they are
missing, so this script also runs on its own). Page cache warm, ``--runs`` alternating runs,
median reported:

* sealift: ``sealift bundle verify DIR -j 2`` on the directory bundle, and on the split tar
  (``bundle.tar`` + ``.parts.json``); throughput = blob bytes / wall seconds;
* yardstick: two ``openssl dgst -sha256`` processes at once over the same files (the blob files
  of the directory; the part files of the split tar), split in two halves balanced by bytes;
  throughput = bytes hashed / wall seconds. OpenSSL uses the CPU's SHA extensions, so two of
  them are what two cores can hash; coreutils ``sha256sum`` is not a fair yardstick here.

A benchmark reports, it never asserts: the last stdout line is a JSON summary, also saved to
bench/out/verify.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_create as shared

DIR_BUNDLE = shared.RUNS / "sealift-dir"
TAR_BUNDLE = shared.RUNS / "tar" / "bundle.tar"
OPENSSL = "openssl"


def bundles_present() -> bool:
    return (DIR_BUNDLE / "sealift-bundle.json").is_file() and Path(
        str(TAR_BUNDLE) + ".parts.json"
    ).is_file()


def halves(files: list[Path]) -> tuple[list[Path], list[Path]]:
    """Two lists of files whose byte totals are as even as greedy largest-first gets them."""
    left: list[Path] = []
    right: list[Path] = []
    sizes = [0, 0]
    for path in sorted(files, key=lambda p: p.stat().st_size, reverse=True):
        side = 0 if sizes[0] <= sizes[1] else 1
        (left if side == 0 else right).append(path)
        sizes[side] += path.stat().st_size
    return left, right


def openssl_pair(files: list[Path]) -> tuple[float, int]:
    """Hash ``files`` with two openssl processes at once; (wall seconds, bytes hashed)."""
    groups = [group for group in halves(files) if group]
    started = time.perf_counter()
    procs = [
        subprocess.Popen(
            [OPENSSL, "dgst", "-sha256", "-r", *map(str, group)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for group in groups
    ]
    for proc in procs:
        _, err = proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"openssl dgst exited {proc.returncode}: {err.decode()[-2000:]}")
    wall = time.perf_counter() - started
    return wall, sum(p.stat().st_size for p in files)


def sealift_verify(bundle: Path, jobs: int) -> tuple[float, int, bool]:
    """One ``sealift bundle verify``; (wall seconds, blob bytes verified, ok)."""
    cmd = [str(shared.SEALIFT), "bundle", "verify", str(bundle), "-j", str(jobs), "--json"]
    started = time.perf_counter()
    result = subprocess.run(cmd, capture_output=True, text=True, env=shared.child_env())
    wall = time.perf_counter() - started
    if result.returncode not in (0, 3):
        raise RuntimeError(f"sealift verify exited {result.returncode}: {result.stderr[-2000:]}")
    report = json.loads(result.stdout)
    return wall, int(report["bytes"]), bool(report["ok"])


def measure(bundle: Path, files: list[Path], jobs: int, runs: int, label: str) -> dict:
    sealift_runs, openssl_runs = [], []
    blob_bytes, all_ok = 0, True
    for number in range(1, runs + 1):
        wall, blob_bytes, ok = sealift_verify(bundle, jobs)
        all_ok = all_ok and ok
        sealift_runs.append(wall)
        o_wall, o_bytes = openssl_pair(files)
        openssl_runs.append(o_wall)
        print(
            f"{label} run {number}: sealift verify {wall:.2f}s"
            f" ({blob_bytes / wall / 1e6:.0f} MB/s, ok={ok}),"
            f" 2x openssl {o_wall:.2f}s ({o_bytes / o_wall / 1e6:.0f} MB/s)",
            flush=True,
        )
    sealift_s = statistics.median(sealift_runs)
    openssl_s = statistics.median(openssl_runs)
    sealift_rate = blob_bytes / sealift_s
    openssl_rate = o_bytes / openssl_s
    return {
        "bytes": blob_bytes,
        "openssl_bytes": o_bytes,
        "ok": all_ok,
        "sealift_s": round(sealift_s, 3),
        "openssl_s": round(openssl_s, 3),
        "sealift_mb_s": round(sealift_rate / 1e6, 1),
        "openssl_mb_s": round(openssl_rate / 1e6, 1),
        "ratio": round(sealift_rate / openssl_rate, 3),
        # Best of the runs: what each side does when the machine leaves it alone.
        "ratio_best": round(min(openssl_runs) / min(sealift_runs) * blob_bytes / o_bytes, 3),
        "all_runs": {"sealift_s": sealift_runs, "openssl_s": openssl_runs},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs of each side (median reported)")
    parser.add_argument("--jobs", "-j", type=int, default=2, help="sealift verify -j")
    args = parser.parse_args()

    bench_started = time.perf_counter()
    host_before = shared.machine()
    foreign = shared.ForeignCpu()
    if not bundles_present():
        print("no bundles from bench_create.py yet: making them once", flush=True)
        shared.RUNS.mkdir(parents=True, exist_ok=True)
        shared.create_bundles(shared.Sizes())

    dir_files = sorted((DIR_BUNDLE / "blobs" / "sha256").iterdir())
    parts_index = json.loads(Path(str(TAR_BUNDLE) + ".parts.json").read_text())
    part_files = [TAR_BUNDLE.parent / part["name"] for part in parts_index["parts"]]
    warmed = shared.warm_cache(DIR_BUNDLE, TAR_BUNDLE.parent)
    print(f"page cache warmed over {warmed / shared.MIB:.0f} MiB of bundles", flush=True)
    shared.run_measured([str(shared.SEALIFT), "--version"])

    directory = measure(DIR_BUNDLE, dir_files, args.jobs, args.runs, "dir")
    split_tar = measure(TAR_BUNDLE, part_files, args.jobs, args.runs, "split tar")

    summary = {
        "bench": "verify",
        "jobs": args.jobs,
        "runs": args.runs,
        "dir": directory,
        "split_tar": split_tar,
        "parts": len(part_files),
        "bench_wall_s": round(time.perf_counter() - bench_started, 1),
        "machine": host_before,
        "loadavg_1m_after": shared.machine()["loadavg_1m"],
        "foreign_cpu_s": foreign.seconds(),
    }
    (shared.OUT / "verify.json").write_text(json.dumps(summary, indent=2) + "\n")
    for label, result in (("directory", directory), ("split tar", split_tar)):
        print(
            f"\n{label}: sealift verify -j {args.jobs} {result['sealift_s']:.2f}s"
            f" = {result['sealift_mb_s']} MB/s; 2x openssl {result['openssl_s']:.2f}s"
            f" = {result['openssl_mb_s']} MB/s; ratio {result['ratio']:.2f}x (target >= 0.8x;"
            f" best against best {result['ratio_best']:.2f}x)",
            flush=True,
        )
    print(f"other processes used {summary['foreign_cpu_s']}s of CPU meanwhile", flush=True)
    compact = {
        **{k: v for k, v in summary.items() if k not in ("dir", "split_tar")},
        **{
            f"{prefix}_{k}": v
            for prefix, result in (("dir", directory), ("tar", split_tar))
            for k, v in result.items()
            if k != "all_runs"
        },
    }
    print(json.dumps(compact, sort_keys=True))


if __name__ == "__main__":
    main()
