"""Small, real, deterministic test content: OCI images, archives, model folders, Helm charts.

Everything is generated locally (nothing is downloaded) and byte-for-byte reproducible, so
tests can assert exact digests and re-running a generator never changes what it wrote.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import os
import shutil
import struct
import subprocess
import tarfile
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path, PurePosixPath

import yaml

SKOPEO_BINARY = "/usr/bin/skopeo"

MT_OCI_INDEX = "application/vnd.oci.image.index.v1+json"
MT_OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
REF_NAME_ANNOTATION = "org.opencontainers.image.ref.name"

# os, architecture and optionally variant, e.g. ("linux", "arm64", "v8").
Platform = tuple[str, str] | tuple[str, str, str]
Layer = Mapping[str, bytes]

_EPOCH = "1970-01-01T00:00:00Z"
_DEFAULT_ENV = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
# Big enough to be realistic, small enough that a chunk never dominates test memory.
_CHUNK = 1 << 20


# --------------------------------------------------------------------------- tar/json basics


def canonical_json(obj: object) -> bytes:
    """Serialize ``obj`` as compact, key-sorted JSON so equal objects hash equally."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def sha256_digest(data: bytes) -> str:
    """Return ``sha256:<hex>`` for ``data``."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _clean_member_path(path: str) -> str:
    # Image layers are rooted at "/" but tar members conventionally have no leading "/" or "./".
    parts = [part for part in PurePosixPath(path).parts if part not in ("/", ".")]
    clean = "/".join(parts)
    if not clean or ".." in parts:
        raise ValueError(f"bad member path {path!r}")
    return clean


def _tarinfo(name: str, *, size: int = 0, is_dir: bool = False) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE if is_dir else tarfile.REGTYPE
    info.mode = 0o755 if is_dir else 0o644
    info.size = 0 if is_dir else size
    # Fixed ownership and time: these are what otherwise makes two builds differ.
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def tar_bytes(files: Layer, *, with_dirs: bool = True) -> bytes:
    """Return a deterministic uncompressed tar of ``files`` (member path -> content).

    Entries are sorted; with ``with_dirs`` every parent directory gets its own entry first,
    as a real filesystem layer would have, so unpackers never have to invent them.
    """
    entries: dict[str, bytes | None] = {}
    for raw_path, content in files.items():
        path = _clean_member_path(raw_path)
        if with_dirs:
            for parent in reversed(PurePosixPath(path).parents[:-1]):
                entries.setdefault(str(parent), None)
        entries[path] = bytes(content)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(entries):
            content = entries[path]
            if content is None:
                tar.addfile(_tarinfo(path, is_dir=True))
            else:
                tar.addfile(_tarinfo(path, size=len(content)), io.BytesIO(content))
    return buf.getvalue()


def gzip_bytes(data: bytes) -> bytes:
    """Gzip ``data`` with mtime 0 so the compressed bytes (and digest) are reproducible."""
    return gzip.compress(data, compresslevel=6, mtime=0)


def _write_tar_of_dir(src_dir: Path, out: tarfile.TarFile, prefix: str = "") -> None:
    for root, dirs, names in os.walk(src_dir):
        dirs.sort()
        rel_root = Path(root).relative_to(src_dir)
        for name in sorted(names):
            file_path = Path(root) / name
            arcname = str(PurePosixPath(prefix) / PurePosixPath(*rel_root.parts, name))
            data = file_path.read_bytes()
            out.addfile(_tarinfo(arcname, size=len(data)), io.BytesIO(data))


# --------------------------------------------------------------------------- package databases


def dpkg_status(packages: Sequence[tuple[str, str, str]]) -> bytes:
    """Return a ``/var/lib/dpkg/status`` file listing (name, version, arch) as installed."""
    paragraphs = []
    for name, version, arch in packages:
        paragraphs.append(
            f"Package: {name}\n"
            "Status: install ok installed\n"
            "Priority: optional\n"
            "Section: misc\n"
            "Installed-Size: 16\n"
            "Maintainer: Sealift Tests <tests@example.invalid>\n"
            f"Architecture: {arch}\n"
            f"Version: {version}\n"
            f"Description: {name} (sealift test package)\n"
            " Generated by the sealift test-suite; contains no files.\n"
        )
    return "\n".join(paragraphs).encode()


def apk_installed(packages: Sequence[tuple[str, str, str]]) -> bytes:
    """Return an Alpine ``/lib/apk/db/installed`` file listing (name, version, arch)."""
    records = []
    for name, version, arch in packages:
        records.append(
            f"P:{name}\nV:{version}\nA:{arch}\nS:1024\nI:4096\n"
            f"T:{name} (sealift test package)\nL:MIT\no:{name}\n"
        )
    # apk terminates every record, including the last, with a blank line.
    return "".join(record + "\n" for record in records).encode()


def python_dist_info(
    name: str, version: str, *, site_dir: str = "usr/lib/python3/dist-packages"
) -> dict[str, bytes]:
    """Return layer files for an installed Python distribution's ``.dist-info/METADATA``."""
    # Installers name the folder after the normalized project name (PEP 427 escaping).
    folder = f"{name.replace('-', '_')}-{version}.dist-info"
    metadata = (
        "Metadata-Version: 2.1\n"
        f"Name: {name}\n"
        f"Version: {version}\n"
        f"Summary: {name} (sealift test distribution)\n"
        "License: MIT\n"
    )
    base = f"{site_dir.strip('/')}/{folder}"
    return {f"{base}/METADATA": metadata.encode(), f"{base}/INSTALLER": b"pip\n"}


# --------------------------------------------------------------------------- OCI image layout


def _platform_fields(platform: Platform) -> dict[str, str]:
    fields = {"os": platform[0], "architecture": platform[1]}
    if len(platform) > 2:
        fields["variant"] = platform[2]  # type: ignore[misc]
    return fields


def _image_config(platform: Platform, diff_ids: list[str]) -> dict[str, object]:
    return {
        **_platform_fields(platform),
        "created": _EPOCH,
        "config": {
            "Env": list(_DEFAULT_ENV),
            "Cmd": ["/bin/sh"],
            "WorkingDir": "/",
            "Labels": {"org.opencontainers.image.vendor": "sealift-tests"},
        },
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": [
            {"created": _EPOCH, "created_by": f"sealift test layer {i}"}
            for i in range(len(diff_ids))
        ],
    }


class _BlobStore:
    """Content-addressed writes into ``<layout>/blobs/sha256``; existing blobs are reused."""

    def __init__(self, layout_dir: Path) -> None:
        self.dir = layout_dir / "blobs" / "sha256"
        self.dir.mkdir(parents=True, exist_ok=True)

    def put(self, data: bytes, media_type: str) -> dict[str, object]:
        digest = sha256_digest(data)
        path = self.dir / digest.split(":", 1)[1]
        if not path.exists():
            # Write-then-rename so a crashed test never leaves a truncated blob behind.
            tmp = path.with_suffix(".tmp")
            tmp.write_bytes(data)
            tmp.replace(path)
        return {"mediaType": media_type, "digest": digest, "size": len(data)}


def _write_image(
    store: _BlobStore, layers: Sequence[Layer], platform: Platform
) -> dict[str, object]:
    layer_descs: list[dict[str, object]] = []
    diff_ids: list[str] = []
    for files in layers:
        raw = tar_bytes(files)
        diff_ids.append(sha256_digest(raw))
        layer_descs.append(store.put(gzip_bytes(raw), MT_OCI_LAYER_GZIP))
    config_desc = store.put(canonical_json(_image_config(platform, diff_ids)), MT_OCI_CONFIG)
    manifest = {
        "schemaVersion": 2,
        "mediaType": MT_OCI_MANIFEST,
        "config": config_desc,
        "layers": layer_descs,
    }
    return store.put(canonical_json(manifest), MT_OCI_MANIFEST)


def _platform_marker_layer(platform: Platform) -> dict[str, bytes]:
    return {"etc/sealift-test-platform": ("/".join(platform) + "\n").encode()}


def write_oci_image_layout(
    path: Path | str,
    *,
    ref_name: str,
    layers: Sequence[Layer],
    platform: Platform = ("linux", "amd64"),
    extra_platforms: Iterable[Platform] = (),
) -> str:
    """Write (or add to) an OCI image layout at ``path``; return the tagged manifest's digest.

    Each element of ``layers`` maps file paths to contents and becomes one gzip tar layer.
    ``index.json`` gets an entry annotated with ``org.opencontainers.image.ref.name`` =
    ``ref_name`` (replacing an earlier entry with that name). With ``extra_platforms`` the
    entry is an OCI image index with one manifest per platform, and each platform's image gets
    one more tiny layer (``etc/sealift-test-platform``) so platforms have distinct blobs as
    real multi-arch images do. Images written to the same layout share identical blobs.
    """
    layout = Path(path)
    layout.mkdir(parents=True, exist_ok=True)
    store = _BlobStore(layout)
    extras = list(extra_platforms)
    if not extras:
        top = _write_image(store, layers, platform)
    else:
        entries = []
        for plat in [platform, *extras]:
            desc = _write_image(store, [*layers, _platform_marker_layer(plat)], plat)
            entries.append({**desc, "platform": _platform_fields(plat)})
        index = {"schemaVersion": 2, "mediaType": MT_OCI_INDEX, "manifests": entries}
        top = store.put(canonical_json(index), MT_OCI_INDEX)
    top = {**top, "annotations": {REF_NAME_ANNOTATION: ref_name}}

    (layout / "oci-layout").write_bytes(canonical_json({"imageLayoutVersion": "1.0.0"}))
    index_path = layout / "index.json"
    manifests: list[dict[str, object]] = []
    if index_path.exists():
        manifests = [
            m
            for m in json.loads(index_path.read_bytes()).get("manifests", [])
            if m.get("annotations", {}).get(REF_NAME_ANNOTATION) != ref_name
        ]
    manifests.append(top)
    index_path.write_bytes(
        canonical_json({"schemaVersion": 2, "mediaType": MT_OCI_INDEX, "manifests": manifests})
    )
    return str(top["digest"])


def write_oci_archive(
    path: Path | str,
    *,
    ref_name: str,
    layers: Sequence[Layer],
    platform: Platform = ("linux", "amd64"),
    extra_platforms: Iterable[Platform] = (),
) -> str:
    """Write an ``oci-archive`` (a tar of an OCI image layout); return the manifest digest."""
    with tempfile.TemporaryDirectory(prefix="oci-layout-") as tmp:
        digest = write_oci_image_layout(
            tmp,
            ref_name=ref_name,
            layers=layers,
            platform=platform,
            extra_platforms=extra_platforms,
        )
        with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
            _write_tar_of_dir(Path(tmp), tar)
    return digest


def write_docker_archive(
    path: Path | str,
    *,
    repo_tag: str,
    layers: Sequence[Layer],
    platform: Platform = ("linux", "amd64"),
) -> str:
    """Write a legacy ``docker save`` tar for one image; return its image ID (config digest).

    Layout: ``manifest.json`` ([{Config, RepoTags, Layers}]), ``repositories``,
    ``<config-hex>.json`` and one ``<layer-id>/layer.tar`` (uncompressed) per layer.
    """
    members: dict[str, bytes] = {}
    layer_paths: list[str] = []
    diff_ids: list[str] = []
    for files in layers:
        raw = tar_bytes(files)
        diff_id = sha256_digest(raw)
        diff_ids.append(diff_id)
        # docker derives v1 layer IDs from the layer chain; readers only follow manifest.json,
        # so the diff_id hex (unique per content) serves the same purpose here.
        layer_id = diff_id.split(":", 1)[1]
        members[f"{layer_id}/layer.tar"] = raw
        members[f"{layer_id}/VERSION"] = b"1.0"
        members[f"{layer_id}/json"] = canonical_json({"id": layer_id, "created": _EPOCH})
        layer_paths.append(f"{layer_id}/layer.tar")
    config = canonical_json(_image_config(platform, diff_ids))
    image_id = sha256_digest(config)
    config_name = image_id.split(":", 1)[1] + ".json"
    members[config_name] = config
    members["manifest.json"] = canonical_json(
        [{"Config": config_name, "RepoTags": [repo_tag], "Layers": layer_paths}]
    )
    repo, _, tag = repo_tag.rpartition(":")
    if repo and "/" not in tag and layer_paths:
        members["repositories"] = canonical_json({repo: {tag: layer_paths[-1].split("/")[0]}})
    Path(path).write_bytes(tar_bytes(members, with_dirs=False))
    return image_id


# --------------------------------------------------------------------------- skopeo push


def _skopeo_env() -> dict[str, str]:
    env = dict(os.environ)
    # Test traffic stays on loopback even if a proxy is configured for the machine.
    no_proxy = ",".join(filter(None, [env.get("NO_PROXY", ""), "127.0.0.1,localhost"]))
    env["NO_PROXY"] = env["no_proxy"] = no_proxy
    return env


def _auth_file(dir_path: Path, registry_host: str, creds: tuple[str, str] | None) -> Path:
    auths: dict[str, object] = {}
    if creds:
        token = base64.b64encode(f"{creds[0]}:{creds[1]}".encode()).decode()
        auths[registry_host] = {"auth": token}
    path = dir_path / "auth.json"
    # Always pass an explicit file (empty when anonymous) so the user's own
    # ~/.docker/config.json or $XDG_RUNTIME_DIR credentials can never leak into a test.
    path.write_text(json.dumps({"auths": auths}))
    path.chmod(0o600)
    return path


def _tls_args(prefix: str, ca_path: Path | str | None, dir_path: Path) -> list[str]:
    if ca_path is None:
        return [f"--{prefix}tls-verify=false"]
    # containers/image loads every *.crt in the cert dir as a CA, so copy under that name.
    cert_dir = dir_path / "certs"
    cert_dir.mkdir(exist_ok=True)
    shutil.copyfile(ca_path, cert_dir / "ca.crt")
    return [f"--{prefix}tls-verify=true", f"--{prefix}cert-dir", str(cert_dir)]


def skopeo_inspect_raw(
    image_ref: str,
    *,
    creds: tuple[str, str] | None = None,
    ca_path: Path | str | None = None,
) -> bytes:
    """Return the raw manifest bytes of a ``docker://`` reference via ``skopeo inspect --raw``."""
    host = image_ref.removeprefix("docker://").split("/", 1)[0]
    with tempfile.TemporaryDirectory(prefix="skopeo-") as tmp:
        tmp_dir = Path(tmp)
        cmd = [
            SKOPEO_BINARY,
            "inspect",
            "--raw",
            "--authfile",
            str(_auth_file(tmp_dir, host, creds)),
            *_tls_args("", ca_path, tmp_dir),
            image_ref,
        ]
        result = subprocess.run(cmd, capture_output=True, env=_skopeo_env(), timeout=60)
    if result.returncode != 0:
        raise RuntimeError(f"skopeo inspect failed: {result.stderr.decode(errors='replace')}")
    return result.stdout


def push_layout_to_registry(
    layout_dir: Path | str,
    ref_name: str,
    registry_host: str,
    repo_and_tag: str,
    *,
    creds: tuple[str, str] | None = None,
    ca_path: Path | str | None = None,
) -> str:
    """Copy ``oci:layout_dir:ref_name`` to ``docker://registry_host/repo_and_tag``.

    Uses ``skopeo copy --all --preserve-digests`` so the registry holds the exact bytes of the
    layout. Plain http when ``ca_path`` is None, else TLS verified against that CA.
    Credentials go through a temporary auth file, never argv. Returns the digest of the
    manifest (or index) as stored in the registry.
    """
    dest = f"docker://{registry_host}/{repo_and_tag}"
    with tempfile.TemporaryDirectory(prefix="skopeo-") as tmp:
        tmp_dir = Path(tmp)
        cmd = [
            SKOPEO_BINARY,
            # Tests must not depend on the machine's /etc/containers/policy.json.
            "--insecure-policy",
            "copy",
            "--all",
            "--preserve-digests",
            "--retry-times",
            "0",
            "--dest-authfile",
            str(_auth_file(tmp_dir, registry_host, creds)),
            *_tls_args("dest-", ca_path, tmp_dir),
            f"oci:{layout_dir}:{ref_name}",
            dest,
        ]
        result = subprocess.run(cmd, capture_output=True, env=_skopeo_env(), timeout=120)
    if result.returncode != 0:
        raise RuntimeError(f"skopeo copy failed: {result.stderr.decode(errors='replace')}")
    return sha256_digest(skopeo_inspect_raw(dest, creds=creds, ca_path=ca_path))


# --------------------------------------------------------------------------- model folder


def _pseudo_random_chunks(seed: int, shard: int, size: int) -> Iterable[bytes]:
    # shake_256 gives arbitrary-length deterministic output; hashing a per-chunk label keeps
    # memory at one chunk however large the shard is.
    offset = 0
    index = 0
    while offset < size:
        length = min(_CHUNK, size - offset)
        label = f"sealift-test-weights:{seed}:{shard}:{index}".encode()
        yield hashlib.shake_256(label).digest(length)
        offset += length
        index += 1


def safetensors_header(tensor_name: str, payload_size: int) -> bytes:
    """Return the safetensors prefix (u64 LE length + JSON) for one U8 tensor of that size."""
    header = {
        "__metadata__": {"format": "pt"},
        tensor_name: {"dtype": "U8", "shape": [payload_size], "data_offsets": [0, payload_size]},
    }
    body = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    # The format pads the header with spaces so tensor data starts 8-byte aligned.
    body += b" " * (-len(body) % 8)
    return struct.pack("<Q", len(body)) + body


def _write_json(path: Path, obj: object) -> str:
    data = (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()
    path.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def write_model_folder(
    path: Path | str,
    *,
    shards: int = 2,
    shard_size: int = 256 * 1024,
    seed: int = 0,
) -> dict[str, str]:
    """Write a Hugging Face-style model folder; return {relative path: sha256 hex} of every file.

    Shards are ``model-0000N-of-0000M.safetensors`` (one U8 tensor of ``shard_size`` payload
    bytes each, deterministic in ``seed``) plus ``model.safetensors.index.json``; with
    ``shards=1`` the single file is ``model.safetensors`` and there is no index, as in HF.
    Also writes config.json, tokenizer.json and generation_config.json.
    """
    if shards < 1 or shard_size < 1:
        raise ValueError("shards and shard_size must be positive")
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    hashes: dict[str, str] = {}
    weight_map: dict[str, str] = {}
    for i in range(1, shards + 1):
        name = "model.safetensors" if shards == 1 else f"model-{i:05d}-of-{shards:05d}.safetensors"
        tensor = f"model.layers.{i - 1}.weight"
        weight_map[tensor] = name
        digest = hashlib.sha256()
        with open(folder / name, "wb") as fh:
            prefix = safetensors_header(tensor, shard_size)
            fh.write(prefix)
            digest.update(prefix)
            for chunk in _pseudo_random_chunks(seed, i, shard_size):
                fh.write(chunk)
                digest.update(chunk)
        hashes[name] = digest.hexdigest()
    if shards > 1:
        hashes["model.safetensors.index.json"] = _write_json(
            folder / "model.safetensors.index.json",
            {"metadata": {"total_size": shards * shard_size}, "weight_map": weight_map},
        )
    hashes["config.json"] = _write_json(
        folder / "config.json",
        {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_attention_heads": 4,
            "num_hidden_layers": shards,
            "num_key_value_heads": 4,
            "vocab_size": 8,
            "torch_dtype": "uint8",
            "bos_token_id": 1,
            "eos_token_id": 2,
        },
    )
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "sealift": 3, "air": 4, "gap": 5, "gpu": 6, ".": 7}
    hashes["tokenizer.json"] = _write_json(
        folder / "tokenizer.json",
        {
            "version": "1.0",
            "truncation": None,
            "padding": None,
            "added_tokens": [],
            "normalizer": None,
            "pre_tokenizer": {"type": "Whitespace"},
            "post_processor": None,
            "decoder": None,
            "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"},
        },
    )
    hashes["generation_config.json"] = _write_json(
        folder / "generation_config.json",
        {"_from_model_config": True, "bos_token_id": 1, "eos_token_id": 2, "do_sample": False},
    )
    return dict(sorted(hashes.items()))


# --------------------------------------------------------------------------- Helm chart

# Component keys of the GPU Operator's values.yaml, each holding repository/image/version.
GPU_OPERATOR_COMPONENTS = (
    "operator",
    "validator",
    "driver",
    "toolkit",
    "devicePlugin",
    "dcgmExporter",
    "gfd",
    "migManager",
)

_CLUSTERPOLICY_CRD = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: clusterpolicies.nvidia.com
spec:
  group: nvidia.com
  names:
    kind: ClusterPolicy
    listKind: ClusterPolicyList
    plural: clusterpolicies
    singular: clusterpolicy
  scope: Cluster
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          x-kubernetes-preserve-unknown-fields: true
"""

_OPERATOR_TEMPLATE = """\
{{- if .Values.operator }}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Chart.Name }}
  namespace: {{ .Release.Namespace }}
spec:
  replicas: 1
  selector:
    matchLabels:
      app: {{ .Chart.Name }}
  template:
    metadata:
      labels:
        app: {{ .Chart.Name }}
    spec:
      containers:
        - name: operator
          {{- with .Values.operator }}
          image: "{{ .repository }}/{{ .image }}:{{ .version | default $.Chart.AppVersion }}"
          {{- end }}
{{- end }}
"""


def write_chart(
    path: Path | str,
    *,
    name: str = "gpu-operator",
    version: str = "v26.7.0",
    images: Sequence[tuple[str, str, str]] | Mapping[str, tuple[str, str, str]] = (),
    nfd_image: tuple[str, str] | None = None,
) -> Path:
    """Write a small Helm chart shaped like NVIDIA's GPU Operator chart into ``path``.

    ``images`` are (repository, image, version) triples; a sequence fills
    :data:`GPU_OPERATOR_COMPONENTS` in order, a mapping names the component keys. Components
    not given are left out of values.yaml so every image the chart names can exist in a test
    registry. ``nfd_image`` (repository, tag) adds the vendored node-feature-discovery
    subchart and its ``node-feature-discovery.image`` values. Returns the chart directory.
    """
    chart = Path(path)
    if isinstance(images, Mapping):
        component_images = dict(images)
    else:
        if len(images) > len(GPU_OPERATOR_COMPONENTS):
            raise ValueError(f"at most {len(GPU_OPERATOR_COMPONENTS)} images")
        component_images = dict(zip(GPU_OPERATOR_COMPONENTS, images, strict=False))

    (chart / "templates").mkdir(parents=True, exist_ok=True)
    (chart / "crds").mkdir(exist_ok=True)
    chart_meta: dict[str, object] = {
        "apiVersion": "v2",
        "name": name,
        "version": version,
        "appVersion": version,
        "description": "Test chart shaped like the NVIDIA GPU Operator chart",
        "type": "application",
        "kubeVersion": ">= 1.16.0-0",
    }
    values: dict[str, object] = {}
    for key, (repository, image, image_version) in component_images.items():
        entry: dict[str, object] = {
            "repository": repository,
            "image": image,
            "version": image_version,
            "imagePullPolicy": "IfNotPresent",
        }
        if key != "operator":
            entry = {"enabled": True, **entry}
        values[key] = entry
    if nfd_image is not None:
        nfd_repo, nfd_tag = nfd_image
        chart_meta["dependencies"] = [
            {
                "name": "node-feature-discovery",
                "version": "0.1.0",
                "repository": "",
                "condition": "nfd.enabled",
            }
        ]
        values["nfd"] = {"enabled": True}
        values["node-feature-discovery"] = {
            "image": {"repository": nfd_repo, "tag": nfd_tag, "pullPolicy": "IfNotPresent"}
        }
        sub = chart / "charts" / "node-feature-discovery"
        (sub / "templates").mkdir(parents=True, exist_ok=True)
        (sub / "Chart.yaml").write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v2",
                    "name": "node-feature-discovery",
                    "version": "0.1.0",
                    "appVersion": nfd_tag,
                },
                sort_keys=False,
            )
        )
        (sub / "values.yaml").write_text(
            yaml.safe_dump({"image": {"repository": nfd_repo, "tag": nfd_tag}}, sort_keys=False)
        )
        (sub / "templates" / "NOTES.txt").write_text("node-feature-discovery test subchart\n")

    (chart / "Chart.yaml").write_text(yaml.safe_dump(chart_meta, sort_keys=False))
    (chart / "values.yaml").write_text(yaml.safe_dump(values, sort_keys=False))
    (chart / "templates" / "operator.yaml").write_text(_OPERATOR_TEMPLATE)
    (chart / "crds" / "nvidia.com_clusterpolicies.yaml").write_text(_CLUSTERPOLICY_CRD)
    return chart


def package_chart_tgz(chart_dir: Path | str, out_path: Path | str) -> Path:
    """Package ``chart_dir`` like ``helm package``: a deterministic .tgz with ``<name>/`` paths.

    ``<name>`` comes from Chart.yaml. Only files are stored (helm writes no directory
    entries), sorted, with mtime 0 and root ownership, so the digest is reproducible.
    """
    src = Path(chart_dir)
    name = yaml.safe_load((src / "Chart.yaml").read_text())["name"]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        _write_tar_of_dir(src, tar, prefix=name)
    out = Path(out_path)
    out.write_bytes(gzip_bytes(buf.getvalue()))
    return out


# --------------------------------------------------------------------------- base images


def write_python_base_image(
    path: Path | str,
    *,
    ref_name: str,
    python_version: str = "3.11.2",
    platform: Platform = ("linux", "amd64"),
    env: Sequence[str] = (),
) -> str:
    """Write an OCI layout holding a small stand-in for a base image with Python.

    One layer with a dpkg status (python3.11, libc6) and an interpreter marker; the config
    says ``PYTHON_VERSION`` as the official Python images do, plus ``env``. Returns the
    manifest digest. Nothing in it runs: tests run the host's interpreter on its files.
    """
    layout = Path(path)
    layout.mkdir(parents=True, exist_ok=True)
    store = _BlobStore(layout)
    arch = platform[1]
    minor = ".".join(python_version.split(".")[:2])
    files = {
        "var/lib/dpkg/status": dpkg_status(
            [("libc6", "2.36-9", arch), (f"python{minor}", python_version, arch)]
        ),
        f"usr/local/bin/python{minor}": b"stand-in\n",
    }
    raw = tar_bytes(files)
    layer = store.put(gzip_bytes(raw), MT_OCI_LAYER_GZIP)
    config = _image_config(platform, [sha256_digest(raw)])
    runtime = config["config"]
    assert isinstance(runtime, dict)
    runtime["Env"] = [*runtime["Env"], f"PYTHON_VERSION={python_version}", *env]
    runtime["Cmd"] = ["python3"]
    config_desc = store.put(canonical_json(config), MT_OCI_CONFIG)
    manifest = {
        "schemaVersion": 2,
        "mediaType": MT_OCI_MANIFEST,
        "config": config_desc,
        "layers": [layer],
    }
    top = {**store.put(canonical_json(manifest), MT_OCI_MANIFEST)}
    top["annotations"] = {REF_NAME_ANNOTATION: ref_name}
    (layout / "oci-layout").write_bytes(canonical_json({"imageLayoutVersion": "1.0.0"}))
    index = {"schemaVersion": 2, "mediaType": MT_OCI_INDEX, "manifests": [top]}
    (layout / "index.json").write_bytes(canonical_json(index))
    return str(top["digest"])
