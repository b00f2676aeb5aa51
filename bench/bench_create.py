#!/usr/bin/env python3
"""Benchmark ``sealift bundle create`` against the obvious peer, side by side in one run.

Inputs (generated once under bench/out/, reused while the sizes stay the same):

* a few OCI images of gzip-wrapped incompressible layers, pushed with skopeo into Debian's
  ``docker-registry`` on loopback (plain http);
* a Hugging Face-style model folder of safetensors shards.

Measured, page cache warm, each side ``--runs`` times, alternating, median reported:

* sealift: ``sealift bundle create -f sealift.yaml -o DIR --plain-http HOST -j N``, then ``sync``
  (sealift fsyncs every blob itself; the ``sync`` is there so both sides end on stable storage);
* peer: ``skopeo copy --preserve-digests docker://HOST/IMAGE oci:DIR/images:TAG`` per image,
  ``cp -r`` of the model folder, then ``sync``;
* sealift's tar form: ``-o DIR/bundle.tar --split 1GiB``, then ``sync``.

The bundles of the last runs stay in bench/out/runs/ for bench_verify.py. A benchmark reports,
it never asserts: the last stdout line is a JSON summary, also saved to bench/out/create.json.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / "out"
INPUTS = OUT / "inputs"
RUNS = OUT / "runs"
REGISTRY_DIR = OUT / "registry"
SEALIFT = REPO / ".venv" / "bin" / "sealift"
SKOPEO = "/usr/bin/skopeo"
GNU_TIME = "/usr/bin/time"
MIB = 1024 * 1024

# The test support code starts the registry and pushes layouts; it lives under tests/.
sys.path.insert(0, str(REPO / "tests"))
from support.content import dpkg_status, push_layout_to_registry, write_model_folder  # noqa: E402
from support.registry_server import RegistryServer  # noqa: E402

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
REF_NAME = "org.opencontainers.image.ref.name"


# --------------------------------------------------------------------------- parameters


@dataclass(frozen=True)
class Sizes:
    """How much input to generate; a change regenerates everything."""

    images: int = 4
    image_mb: int = 150  # split over three layers: 15%, 40%, 45%
    model_mb: int = 1400
    shards: int = 3

    def as_dict(self) -> dict[str, int]:
        return {
            "images": self.images,
            "image_mb": self.image_mb,
            "model_mb": self.model_mb,
            "shards": self.shards,
        }


def child_env() -> dict[str, str]:
    """Environment for sealift and skopeo: loopback traffic never goes through a proxy."""
    env = dict(os.environ)
    no_proxy = ",".join(filter(None, [env.get("NO_PROXY", ""), "127.0.0.1,localhost"]))
    env["NO_PROXY"] = env["no_proxy"] = no_proxy
    return env


def machine() -> dict[str, object]:
    """What the figures were measured on: cores, CPU model, RAM, UTC time, load average."""
    model = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    mem_kib = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem_kib = int(line.split()[1])
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    changed = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return {
        # The code measured: the commit, and whether tracked files differed from it.
        "git": head + ("-dirty" if changed else ""),
        "nproc": os.cpu_count(),
        "cpu": model,
        "ram_gib": round(mem_kib / 1024 / 1024, 1),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        # Other work on the machine during a run shows up here; figures are then noisy.
        "loadavg_1m": float(Path("/proc/loadavg").read_text().split()[0]),
    }


class ForeignCpu:
    """CPU seconds that processes other than this benchmark and its children used meanwhile.

    Figures taken while other work ran on the machine are noisy; this says how much there was.
    """

    def __init__(self) -> None:
        self.start = self._busy() - self._ours()

    @staticmethod
    def _busy() -> float:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
        user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[:8])
        return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")

    @staticmethod
    def _ours() -> float:
        total = 0.0
        for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
            usage = resource.getrusage(who)
            total += usage.ru_utime + usage.ru_stime
        return total

    def seconds(self) -> float:
        return round(max(self._busy() - self._ours() - self.start, 0.0), 1)


# --------------------------------------------------------------------------- input generation


class _HashingSink:
    """Counts and hashes what passes on its way to ``target``."""

    def __init__(self, target) -> None:
        self.target = target
        self.hasher = hashlib.sha256()
        self.size = 0

    def write(self, data) -> int:
        self.hasher.update(data)
        self.size += len(data)
        self.target.write(data)
        return len(data)

    def flush(self) -> None:
        pass

    def digest(self) -> str:
        return "sha256:" + self.hasher.hexdigest()


class _NoiseReader:
    """``size`` bytes of incompressible noise, made with SHAKE-256 (cheaper than urandom here)."""

    BLOCK = 4 * MIB

    def __init__(self, label: str, size: int) -> None:
        self.label = label
        self.left = size
        self.block_no = 0
        self.pending = b""

    def read(self, count: int = -1) -> bytes:
        if count < 0:
            count = self.left + len(self.pending)
        while len(self.pending) < count and self.left > 0:
            take = min(self.BLOCK, self.left)
            seed = f"{self.label}/{self.block_no}".encode()
            self.pending += hashlib.shake_256(seed).digest(take)
            self.left -= take
            self.block_no += 1
        out, self.pending = self.pending[:count], self.pending[count:]
        return out


def _write_layer(
    blob_dir: Path, label: str, files: list[tuple[str, int | bytes]]
) -> tuple[dict, str]:
    """Stream one gzip (stored, level 0) tar layer into the blob store; (descriptor, diff_id)."""
    temporary = blob_dir / f".layer-{label}.tmp"
    with temporary.open("wb") as handle:
        compressed = _HashingSink(handle)
        with gzip.GzipFile(fileobj=compressed, mode="wb", compresslevel=0, mtime=0) as zipped:
            plain = _HashingSink(zipped)
            with tarfile.open(
                fileobj=plain, mode="w|", format=tarfile.PAX_FORMAT, copybufsize=4 * MIB
            ) as tar:
                for name, content in files:
                    info = tarfile.TarInfo(name)
                    info.mtime = 0
                    info.mode = 0o644
                    if isinstance(content, bytes):
                        info.size = len(content)
                        tar.addfile(info, _BytesReader(content))
                    else:
                        info.size = content
                        tar.addfile(info, _NoiseReader(f"{label}/{name}", content))
    digest = compressed.digest()
    temporary.rename(blob_dir / digest.removeprefix("sha256:"))
    descriptor = {"mediaType": OCI_LAYER_GZIP, "digest": digest, "size": compressed.size}
    return descriptor, plain.digest()


class _BytesReader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def read(self, count: int = -1) -> bytes:
        end = len(self.data) if count < 0 else self.at + count
        out = self.data[self.at : end]
        self.at += len(out)
        return out


def _put_json(blob_dir: Path, obj: object, media_type: str) -> dict:
    data = json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    (blob_dir / digest.removeprefix("sha256:")).write_bytes(data)
    return {"mediaType": media_type, "digest": digest, "size": len(data)}


def write_images(layout: Path, sizes: Sizes) -> list[str]:
    """One OCI layout holding ``sizes.images`` images of three layers each; their ref names."""
    blob_dir = layout / "blobs" / "sha256"
    blob_dir.mkdir(parents=True, exist_ok=True)
    total = sizes.image_mb * MIB
    entries, refs = [], []
    for number in range(sizes.images):
        ref = f"img{number}-v1"
        status = dpkg_status([(f"bench-pkg-{number}-{k}", f"1.{k}.0", "amd64") for k in range(40)])
        plan = [
            # A base layer with a package database, as the SBOM scanner would meet it.
            [("var/lib/dpkg/status", status), ("usr/lib/base.bin", int(total * 0.15))],
            [(f"opt/app/part{k}.bin", int(total * 0.10)) for k in range(4)],
            [(f"usr/local/lib/model{k}.so", int(total * 0.15)) for k in range(3)],
        ]
        layers, diff_ids = [], []
        for position, files in enumerate(plan):
            descriptor, diff_id = _write_layer(blob_dir, f"{ref}-{position}", files)
            layers.append(descriptor)
            diff_ids.append(diff_id)
        config = _put_json(
            blob_dir,
            {
                "architecture": "amd64",
                "os": "linux",
                "created": "1970-01-01T00:00:00Z",
                "config": {"Cmd": ["/bin/sh"], "Labels": {"bench": ref}},
                "rootfs": {"type": "layers", "diff_ids": diff_ids},
            },
            OCI_CONFIG,
        )
        manifest = _put_json(
            blob_dir,
            {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": config, "layers": layers},
            OCI_MANIFEST,
        )
        entries.append({**manifest, "annotations": {REF_NAME: ref}})
        refs.append(ref)
    (layout / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    (layout / "index.json").write_text(
        json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries})
    )
    return refs


def generate_inputs(sizes: Sizes) -> None:
    """Write the image layout and the model folder (the registry is filled by push_inputs)."""
    shutil.rmtree(INPUTS, ignore_errors=True)
    shutil.rmtree(REGISTRY_DIR, ignore_errors=True)
    INPUTS.mkdir(parents=True)
    started = time.perf_counter()
    write_images(INPUTS / "layout", sizes)
    print(f"  images written in {time.perf_counter() - started:.1f}s", flush=True)
    started = time.perf_counter()
    shard = sizes.model_mb * MIB // sizes.shards
    write_model_folder(INPUTS / "model", shards=sizes.shards, shard_size=shard, seed=7)
    print(f"  model written in {time.perf_counter() - started:.1f}s", flush=True)


def push_inputs(registry: RegistryServer) -> list[str]:
    """Push every image of the generated layout into the registry; their repository:tags."""
    index = json.loads((INPUTS / "layout" / "index.json").read_text())
    pushed = []
    for entry in index["manifests"]:
        ref = entry["annotations"][REF_NAME]
        repo_tag = f"bench/{ref.rsplit('-', 1)[0]}:{ref.rsplit('-', 1)[1]}"
        push_layout_to_registry(INPUTS / "layout", ref, registry.host, repo_tag)
        pushed.append(repo_tag)
    return pushed


def start_registry(sizes: Sizes, *, fresh: bool = False) -> tuple[RegistryServer, list[str]]:
    """Start the registry over bench/out/registry, generating and pushing inputs if needed."""
    marker = INPUTS / "inputs.json"
    recorded = json.loads(marker.read_text()) if marker.is_file() else {}
    reuse = not fresh and recorded.get("sizes") == sizes.as_dict()
    if not reuse:
        print("generating inputs (once; reused while the sizes are unchanged)", flush=True)
        marker.unlink(missing_ok=True)
        generate_inputs(sizes)
    REGISTRY_DIR.mkdir(parents=True, exist_ok=True)
    registry = RegistryServer(work_dir=REGISTRY_DIR).start()
    try:
        if reuse:
            images = list(recorded["images"])
        else:
            started = time.perf_counter()
            images = push_inputs(registry)
            print(f"  pushed in {time.perf_counter() - started:.1f}s", flush=True)
            marker.write_text(json.dumps({"sizes": sizes.as_dict(), "images": images}))
    except BaseException:
        registry.stop()
        raise
    return registry, images


def write_bundle_file(registry: RegistryServer, images: list[str]) -> Path:
    """sealift.yaml naming the registry images (port of this run) and the model folder."""
    lines = [
        "apiVersion: sealift.dev/v1alpha1",
        "kind: Bundle",
        "metadata:",
        "  name: bench",
        '  version: "1.0.0"',
        "images:",
        *[f"  - ref: {registry.host}/{image}" for image in images],
        "models:",
        "  - name: bench-model",
        '    version: "1"',
        "    path: model",
        "",
    ]
    path = INPUTS / "sealift.yaml"
    path.write_text("\n".join(lines))
    auth = INPUTS / "auth.json"
    # An explicit, empty auth file: no credentials of the machine are looked up by either side.
    auth.write_text('{"auths": {}}')
    return path


def warm_cache(*roots: Path) -> int:
    """Read every file under ``roots`` once so both sides start from a warm page cache."""
    total = 0
    for root in roots:
        for folder, _dirs, names in os.walk(root):
            for name in names:
                with open(os.path.join(folder, name), "rb") as handle:
                    while chunk := handle.read(8 * MIB):
                        total += len(chunk)
    return total


# --------------------------------------------------------------------------- measuring


def sync() -> float:
    """Run ``sync``; its wall time."""
    started = time.perf_counter()
    subprocess.run(["sync"], check=True)
    return time.perf_counter() - started


def clear(path: Path) -> None:
    """Remove an earlier run's output and flush, so no run pays for another's writeback."""
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()
    sync()


def run_measured(cmd: list[str], rss_file: Path | None = None) -> tuple[float, int | None, str]:
    """Run a command; (wall seconds, peak RSS in KiB when asked for, stdout)."""
    env = child_env()
    if rss_file is not None and os.access(GNU_TIME, os.X_OK):
        cmd = [GNU_TIME, "-v", "-o", str(rss_file), *cmd]
    elif rss_file is not None:
        # No GNU time: a tiny parent whose only child is the command reports its ru_maxrss.
        probe = (
            "import resource,subprocess,sys;"
            "r=subprocess.run(sys.argv[2:]);"
            "open(sys.argv[1],'w').write("
            "'Maximum resident set size (kbytes): %d\\n'%"
            "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss);"
            "sys.exit(r.returncode)"
        )
        cmd = [sys.executable, "-c", probe, str(rss_file), *cmd]
    started = time.perf_counter()
    result = subprocess.run(cmd, capture_output=True, env=env, text=True)
    wall = time.perf_counter() - started
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {result.returncode}:\n{result.stderr[-3000:]}")
    rss = None
    if rss_file is not None:
        for line in rss_file.read_text().splitlines():
            if "Maximum resident set size" in line:
                rss = int(line.rsplit(":", 1)[1])
    return wall, rss, result.stdout


def run_sealift(bundle_file: Path, output: Path, host: str, jobs: int, split: str | None) -> dict:
    """One sealift create; wall, wall+sync, peak RSS and the bytes it wrote."""
    clear(output if split is None else output.parent)
    output.parent.mkdir(parents=True, exist_ok=True)
    cmd = [str(SEALIFT), "bundle", "create", "-f", str(bundle_file), "-o", str(output)]
    cmd += ["--plain-http", host, "-j", str(jobs), "--json"]
    cmd += ["--authfile", str(INPUTS / "auth.json")]
    if split is not None:
        cmd += ["--split", split]
    wall, rss, stdout = run_measured(cmd, RUNS / "sealift.time")
    synced = sync()
    document = json.loads(stdout)
    return {
        "wall_s": wall,
        "sync_s": synced,
        "total_s": wall + synced,
        "rss_kib": rss,
        "bytes": document["totals"]["bytes"],
        "blobs": document["totals"]["blobs"],
    }


def run_peer(output: Path, host: str, images: list[str]) -> dict:
    """skopeo copy of every image into one OCI layout, cp -r of the model, then sync."""
    clear(output)
    output.mkdir(parents=True)
    started = time.perf_counter()
    peak = 0
    for image in images:
        tag = image.replace("/", "-").replace(":", "-")
        cmd = [SKOPEO, "--insecure-policy", "copy", "--preserve-digests", "--retry-times", "0"]
        cmd += ["--src-tls-verify=false", "--src-authfile", str(INPUTS / "auth.json")]
        cmd += [f"docker://{host}/{image}", f"oci:{output / 'images'}:{tag}"]
        _, rss, _ = run_measured(cmd, RUNS / "skopeo.time")
        peak = max(peak, rss or 0)
    run_measured(["cp", "-r", str(INPUTS / "model"), str(output / "model")])
    wall = time.perf_counter() - started
    synced = sync()
    return {"wall_s": wall, "sync_s": synced, "total_s": wall + synced, "rss_kib": peak}


def median(runs: list[dict], key: str) -> float:
    return statistics.median(run[key] for run in runs)


def create_bundles(sizes: Sizes, *, jobs: int = 4, fresh: bool = False) -> None:
    """Only make the two bundles bench_verify.py reads (no measuring, no peer)."""
    registry, images = start_registry(sizes, fresh=fresh)
    try:
        bundle_file = write_bundle_file(registry, images)
        run_sealift(bundle_file, RUNS / "sealift-dir", registry.host, jobs, None)
        run_sealift(bundle_file, RUNS / "tar" / "bundle.tar", registry.host, jobs, "1GiB")
    finally:
        registry.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each side (median reported)")
    parser.add_argument("--jobs", "-j", type=int, default=4, help="sealift -j")
    parser.add_argument("--images", type=int, default=Sizes.images)
    parser.add_argument("--image-mb", type=int, default=Sizes.image_mb)
    parser.add_argument("--model-mb", type=int, default=Sizes.model_mb)
    parser.add_argument("--fresh", action="store_true", help="regenerate the inputs")
    args = parser.parse_args()
    sizes = Sizes(images=args.images, image_mb=args.image_mb, model_mb=args.model_mb)

    bench_started = time.perf_counter()
    host_before = machine()
    foreign = ForeignCpu()
    RUNS.mkdir(parents=True, exist_ok=True)
    registry, images = start_registry(sizes, fresh=args.fresh)
    try:
        bundle_file = write_bundle_file(registry, images)
        warmed = warm_cache(INPUTS / "model", REGISTRY_DIR / "storage")
        print(f"page cache warmed over {warmed / MIB:.0f} MiB of inputs", flush=True)
        # Load both programs once so neither side's first run pays for a cold binary.
        run_measured([str(SEALIFT), "--version"])
        run_measured([SKOPEO, "--version"])

        sealift_runs, peer_runs, tar_runs = [], [], []
        for number in range(1, args.runs + 1):
            sealift_runs.append(
                run_sealift(bundle_file, RUNS / "sealift-dir", registry.host, args.jobs, None)
            )
            peer_runs.append(run_peer(RUNS / "peer", registry.host, images))
            print(
                f"run {number}: sealift {sealift_runs[-1]['wall_s']:.2f}s"
                f" (+sync {sealift_runs[-1]['sync_s']:.2f}s),"
                f" peer {peer_runs[-1]['wall_s']:.2f}s (+sync {peer_runs[-1]['sync_s']:.2f}s)",
                flush=True,
            )
        clear(RUNS / "peer")
        for number in range(1, args.runs + 1):
            tar_runs.append(
                run_sealift(
                    bundle_file, RUNS / "tar" / "bundle.tar", registry.host, args.jobs, "1GiB"
                )
            )
            print(
                f"tar run {number}: sealift {tar_runs[-1]['wall_s']:.2f}s"
                f" (+sync {tar_runs[-1]['sync_s']:.2f}s)",
                flush=True,
            )
    finally:
        registry.stop()

    bundle_bytes = sealift_runs[-1]["bytes"]
    sl_total, peer_total = median(sealift_runs, "total_s"), median(peer_runs, "total_s")
    summary = {
        "bench": "create",
        "bytes": bundle_bytes,
        "blobs": sealift_runs[-1]["blobs"],
        "images": len(images),
        "jobs": args.jobs,
        "runs": args.runs,
        "sealift_s": round(median(sealift_runs, "wall_s"), 3),
        "sealift_sync_s": round(sl_total, 3),
        "peer_s": round(median(peer_runs, "wall_s"), 3),
        "peer_sync_s": round(peer_total, 3),
        "ratio": round(sl_total / peer_total, 3),
        # Best of the runs: what each side does when the machine leaves it alone.
        "ratio_best": round(
            min(r["total_s"] for r in sealift_runs) / min(r["total_s"] for r in peer_runs), 3
        ),
        "ratio_without_sync": round(
            median(sealift_runs, "wall_s") / median(peer_runs, "wall_s"), 3
        ),
        "sealift_peak_rss_mib": round(max(r["rss_kib"] or 0 for r in sealift_runs) / 1024, 1),
        "skopeo_peak_rss_mib": round(max(r["rss_kib"] for r in peer_runs) / 1024, 1),
        "tar_split_s": round(median(tar_runs, "wall_s"), 3),
        "tar_split_sync_s": round(median(tar_runs, "total_s"), 3),
        "tar_peak_rss_mib": round(max(r["rss_kib"] or 0 for r in tar_runs) / 1024, 1),
        "sealift_mb_s": round(bundle_bytes / sl_total / 1e6, 1),
        "peer_mb_s": round(bundle_bytes / peer_total / 1e6, 1),
        "all_runs": {"sealift": sealift_runs, "peer": peer_runs, "tar": tar_runs},
        "bench_wall_s": round(time.perf_counter() - bench_started, 1),
        "machine": host_before,
        "loadavg_1m_after": machine()["loadavg_1m"],
        "foreign_cpu_s": foreign.seconds(),
    }
    (OUT / "create.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(
        f"\nbundle {bundle_bytes / 1e9:.2f} GB, {summary['blobs']} blobs, median of {args.runs}\n"
        f"  sealift create (dir) + sync : {summary['sealift_sync_s']:.2f}s"
        f" ({summary['sealift_s']:.2f}s before sync), peak RSS"
        f" {summary['sealift_peak_rss_mib']} MiB\n"
        f"  skopeo + cp -r + sync       : {summary['peer_sync_s']:.2f}s"
        f" ({summary['peer_s']:.2f}s before sync)\n"
        f"  ratio sealift/peer          : {summary['ratio']:.2f}x (target <= 1.2x;"
        f" best run against best run {summary['ratio_best']:.2f}x)\n"
        f"  sealift create (split tar)  : {summary['tar_split_sync_s']:.2f}s with sync,"
        f" peak RSS {summary['tar_peak_rss_mib']} MiB\n"
        f"  other processes used {summary['foreign_cpu_s']}s of CPU meanwhile"
        " (more than a few seconds: figures are noisy)",
        flush=True,
    )
    compact = {k: v for k, v in summary.items() if k != "all_runs"}
    print(json.dumps(compact, sort_keys=True))


if __name__ == "__main__":
    main()
