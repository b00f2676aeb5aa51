#!/usr/bin/env python3
"""Benchmark ``sealift install`` (mirror load) against skopeo image by image, in one run.

Takes the directory bundle bench_create.py leaves in bench/out/runs/sealift-dir (4 images and a
1.4 GB model: 2.1 GB in all) and a fresh, empty Debian docker-registry on loopback per run:

* sealift: ``sealift install BUNDLE --registry 127.0.0.1:PORT/s --insecure --push-models -j 4``
  (every artifact of the bundle, the model as a ModelPack artifact, blobs hashed as they move);
* peer: ``skopeo copy --preserve-digests oci:BUNDLE:REF docker://127.0.0.1:PORT/p/REF`` for
  the same artifacts, one after the other (plain ``skopeo copy`` recompresses and changes digests:
  not a fair peer);
* re-push: sealift again into the now complete mirror: no blob byte should move.

Peak RSS from /usr/bin/time -v. A benchmark reports, it never asserts; the last stdout line is
a JSON summary, also saved to bench/out/install.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_create as shared
from support.registry_server import RegistryServer

BUNDLE = shared.RUNS / "sealift-dir"
WORK = shared.OUT / "install"


def artifacts() -> list[str]:
    manifest = json.loads((BUNDLE / "sealift-bundle.json").read_text())
    return [
        a["ref"] for a in manifest["artifacts"] if a["kind"] in ("image", "chart", "sbom", "model")
    ]


def fresh_registry(name: str) -> RegistryServer:
    folder = WORK / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return RegistryServer(work_dir=folder).start()


def run_sealift(host: str, prefix: str, jobs: int) -> dict:
    audit = WORK / f"{prefix}.audit.jsonl"
    audit.unlink(missing_ok=True)
    cmd = [
        str(shared.SEALIFT), "install", str(BUNDLE), "--registry", f"{host}/{prefix}", "--insecure",
        "--push-models", "-j", str(jobs), "--json", "-q", "--audit-log", str(audit),
        "--existing-tags", "overwrite",
    ]  # fmt: skip
    wall, rss, out = shared.run_measured(cmd, WORK / "sealift.time")
    result = json.loads(out)
    return {"wall_s": wall, "rss_kib": rss, "bytes": result["mirror"]["bytes_uploaded"]}


def run_skopeo(host: str, prefix: str) -> dict:
    wall_total, peak = 0.0, 0
    for ref in artifacts():
        cmd = [
            shared.SKOPEO, "--insecure-policy", "copy", "--preserve-digests",
            "--dest-tls-verify=false", "--dest-authfile", str(shared.INPUTS / "auth.json"),
            f"oci:{BUNDLE}:{ref}", f"docker://{host}/{prefix}/{ref}",
        ]  # fmt: skip
        wall, rss, _ = shared.run_measured(cmd, WORK / "skopeo.time")
        wall_total += wall
        peak = max(peak, rss or 0)
    return {"wall_s": wall_total, "rss_kib": peak}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("-j", "--jobs", type=int, default=4)
    args = parser.parse_args()
    if not (BUNDLE / "sealift-bundle.json").is_file():
        shared.create_bundles(shared.Sizes())
    WORK.mkdir(parents=True, exist_ok=True)
    (shared.INPUTS / "auth.json").write_text("{}")
    size = sum(p.stat().st_size for p in (BUNDLE / "blobs" / "sha256").iterdir())
    shared.warm_cache(BUNDLE)
    runs: dict[str, list[dict]] = {"sealift": [], "skopeo": [], "repush": []}
    for number in range(args.runs):
        for side in ("sealift", "skopeo"):
            registry = fresh_registry(f"{side}-{number}")
            try:
                if side == "sealift":
                    runs["sealift"].append(run_sealift(registry.host, "s", args.jobs))
                    runs["repush"].append(run_sealift(registry.host, "s", args.jobs))
                else:
                    runs["skopeo"].append(run_skopeo(registry.host, "p"))
            finally:
                registry.stop()
                shutil.rmtree(WORK / f"{side}-{number}", ignore_errors=True)
    ours = statistics.median(r["wall_s"] for r in runs["sealift"])
    peer = statistics.median(r["wall_s"] for r in runs["skopeo"])
    repush = statistics.median(r["wall_s"] for r in runs["repush"])
    summary = {
        "bench": "install",
        "machine": shared.machine(),
        "bytes": size,
        "artifacts": len(artifacts()),
        "jobs": args.jobs,
        "runs": args.runs,
        "sealift_s": round(ours, 3),
        "skopeo_s": round(peer, 3),
        "ratio": round(ours / peer, 3),
        "repush_s": round(repush, 3),
        "repush_bytes": max(r["bytes"] for r in runs["repush"]),
        "sealift_peak_rss_mib": round(max(r["rss_kib"] or 0 for r in runs["sealift"]) / 1024, 1),
        "skopeo_peak_rss_mib": round(max(r["rss_kib"] or 0 for r in runs["skopeo"]) / 1024, 1),
        "all_runs": runs,
    }
    print(f"bundle {size / 1e9:.2f} GB in {summary['artifacts']} artifacts, median of {args.runs}")
    print(f"  sealift install -j {args.jobs}       : {ours:.2f}s ({size / ours / 1e6:.0f} MB/s)")
    print(
        f"  skopeo --preserve-digests x{summary['artifacts']} : {peer:.2f}s"
        f" ({size / peer / 1e6:.0f} MB/s)"
    )
    print(f"  ratio sealift/skopeo         : {ours / peer:.2f}x (target <= 0.8x)")
    print(
        f"  re-push, all present         : {repush:.2f}s, {summary['repush_bytes']} blob bytes sent"
    )
    print(
        f"  peak RSS sealift / skopeo    : {summary['sealift_peak_rss_mib']}"
        f" / {summary['skopeo_peak_rss_mib']} MiB"
    )
    (shared.OUT / "install.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "all_runs"}, sort_keys=True))


if __name__ == "__main__":
    main()
