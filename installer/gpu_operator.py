"""The NVIDIA GPU Operator from the chart in the bundle, with every image pointing at the mirror.

The chart's own default values say which images it runs ({repository, image, version} for the
operator and each component, {repository, tag} for the node-feature-discovery subchart). Each one
is matched to an image of the bundle and rewritten to the mirror; an enabled component whose
image the bundle lacks is refused here, before anything is rendered. The chart is then rendered
by ``helm template`` (Helm is the chart's own renderer; sealift applies the objects itself so it
can check every image and apply server-side with its field manager).

The chart composes ``repository/image:version`` in its templates, so chart images are named by
tag; install checks that each mirror tag still resolves to the digest the bundle verified.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sealift.bundles.bundle_manifest import Artifact
from sealift.errors import InputError, ResourceError
from sealift.image_reference import looks_like_host
from sealift.installer.mirror import MirrorTarget
from sealift.installer.site_file import GPU_TAINT_KEY, Site

HELM_ENV = "SEALIFT_HELM"


@dataclass(frozen=True)
class ChartImage:
    """One image named by chart values: where, in which shape, and what it names."""

    path: tuple[str, ...]
    shape: str  # "triplet" ({repository, image, version}) or "repo-tag" ({repository, tag})
    repository: str
    tag: str
    # Whether the values named no tag and the chart's appVersion default was used.
    defaulted: bool = False


@dataclass(frozen=True)
class MirroredImage:
    """A chart image (or one tag of it) and the bundle image it was matched to."""

    chart: ChartImage
    artifact: Artifact
    mirror_repository: str
    tag: str

    @property
    def by_tag(self) -> str:
        return f"{self.mirror_repository}:{self.tag}"

    @property
    def by_digest(self) -> str:
        return f"{self.mirror_repository}@{self.artifact.digest}"


DRIVER_PATH = ("driver",)


def chart_images(
    values: Any, app_versions: dict[str, str], path: tuple[str, ...] = ()
) -> Iterator[ChartImage]:
    """Every image the values name, skipping components that are switched off.

    A missing version or tag is what the templates default it to: the appVersion of the chart,
    or of the subchart whose values hold it.
    """
    if not isinstance(values, dict) or values.get("enabled") is False:
        return
    default = app_versions.get(path[0] if path and path[0] in app_versions else "", "")
    repository, image = values.get("repository"), values.get("image")
    if isinstance(repository, str) and isinstance(image, str):
        version = values.get("version", values.get("tag"))
        yield ChartImage(
            path,
            "triplet",
            f"{repository.rstrip('/')}/{image}",
            str(version if version is not None else default),
            version is None,
        )
    elif isinstance(repository, str) and path and path[-1] == "image":
        tag = values.get("tag")
        yield ChartImage(
            path, "repo-tag", repository, str(tag if tag is not None else default), tag is None
        )
    # Components nest others (driver.manager inside driver): keep walking.
    for key, value in values.items():
        yield from chart_images(value, app_versions, (*path, str(key)))


def _matches(repository: str, artifact: Artifact) -> bool:
    # The bundle drops the source registry's host, and a vendor may have added a prefix of its
    # own (registry/prefix/nvidia/x): match the path after the host as a suffix.
    first, _, rest = repository.partition("/")
    path = rest if rest and looks_like_host(first) else repository
    return artifact.is_repository(path)


def _match_one(
    wanted: ChartImage, tag: str, images: tuple[Artifact, ...], mirror: MirrorTarget, chart: str
) -> MirroredImage:
    candidates = [
        artifact
        for artifact in images
        if _matches(wanted.repository, artifact) and artifact.tag == tag
    ]
    if not candidates or not tag:
        where = ".".join(wanted.path) or "(top level)"
        raise InputError(
            f"chart {chart} values {where} runs {wanted.repository}:{tag or '<no tag>'},"
            " which the bundle does not carry",
            hint="add the image to the bundle file's images, or switch the component off",
        )
    # The longest matching name is the most specific one.
    best = max(candidates, key=lambda a: len(a.ref))
    return MirroredImage(
        wanted, best, f"{mirror.registry}/{mirror.repository(best.repository)}", tag
    )


def match_images(
    values: dict[str, Any],
    app_versions: dict[str, str],
    images: tuple[Artifact, ...],
    mirror: MirrorTarget,
    *,
    chart: str,
    driver_tags: tuple[str, ...] = (),
) -> list[MirroredImage]:
    """Match each enabled chart image to a bundle image of the same repository and tag.

    The driver is the exception: the operator pulls ``version-<os>`` (or, precompiled,
    ``branch-<kernel>-<os>``), never ``version`` itself, so the site file lists those tags.
    """
    matched: list[MirroredImage] = []
    for wanted in chart_images(values, app_versions):
        if wanted.path == DRIVER_PATH:
            if not driver_tags:
                raise InputError(
                    f"chart {chart} runs the driver container, but the site file lists no"
                    " gpuOperator.driver.tags",
                    hint="list the driver image tags your nodes pull, e.g. 580.95.05-ubuntu22.04"
                    " or (precompiled) 580-5.15.0-78-generic-ubuntu22.04; or strategy: host",
                )
            matched += [_match_one(wanted, tag, images, mirror, chart) for tag in driver_tags]
            continue
        matched.append(_match_one(wanted, wanted.tag, images, mirror, chart))
    return matched


def _set(tree: dict[str, Any], path: tuple[str, ...], value: dict[str, Any]) -> None:
    node = tree
    for key in path:
        node = node.setdefault(key, {})
    node.update(value)


def operator_values(
    values: dict[str, Any],
    app_versions: dict[str, str],
    site: Site,
    images: tuple[Artifact, ...],
    mirror: MirrorTarget,
    *,
    chart: str,
) -> tuple[dict[str, Any], list[MirroredImage]]:
    """The values install passes to the chart: mirror images, driver strategy, MIG, taints."""
    overrides: dict[str, Any] = {}
    driver: dict[str, Any] = {"enabled": site.driver_strategy != "host"}
    if site.driver_strategy == "precompiled":
        driver["usePrecompiled"] = True
    if site.driver_strategy == "packageRepository":
        driver["repoConfig"] = {"configMapName": site.driver_repository_config_map}
    overrides["driver"] = driver
    overrides["mig"] = {"strategy": site.mig_strategy if site.mig_strategy != "none" else "single"}
    overrides["migManager"] = {"enabled": site.mig_strategy != "none"}
    tolerations = [{"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]
    for pool in site.pools:
        if pool.taint is not None and pool.taint.key != GPU_TAINT_KEY:
            tolerations.append(
                {"key": pool.taint.key, "operator": "Exists", "effect": pool.taint.effect}
            )
    overrides["daemonsets"] = {"tolerations": tolerations}
    # Images of components switched off by the overrides are not needed from the bundle.
    effective = _merge(values, overrides)
    # The tags are checked against the version before any is looked for in the bundle.
    driver_version = _driver_version(effective, site, chart) if site.driver_tags else ""
    matched = match_images(
        effective, app_versions, images, mirror, chart=chart, driver_tags=site.driver_tags
    )
    for image in matched:
        if image.chart.shape == "triplet":
            repository, _, name = image.mirror_repository.rpartition("/")
            _set(
                overrides,
                image.chart.path,
                # The values' own version (the driver's tags add the OS the operator appends).
                {"repository": repository, "image": name, "version": image.chart.tag},
            )
        else:
            _set(
                overrides,
                image.chart.path,
                {"repository": image.mirror_repository, "tag": image.chart.tag},
            )
    if driver_version:
        overrides["driver"]["version"] = driver_version
    if site.mirror_pull_secret:
        # The mirror's credentials, by Secret name: component values take names, subcharts'
        # pod specs take {name} entries.
        for image in matched:
            path = image.chart.path
            if image.chart.shape == "triplet":
                _set(overrides, path, {"imagePullSecrets": [site.mirror_pull_secret]})
            else:
                _set(overrides, path[:1], {"imagePullSecrets": [{"name": site.mirror_pull_secret}]})
    return overrides, matched


def _driver_version(values: dict[str, Any], site: Site, chart: str) -> str:
    """The driver version the operator composes the site's tags from, checked against them.

    Precompiled images are tagged ``<branch>-<kernel>-<os>`` and the operator wants the branch;
    compiled ones ``<version>-<os>`` and it wants the version. A tag the operator would never
    compose is a tag the nodes would never pull.
    """
    if site.driver_strategy == "precompiled":
        branches = {tag.split("-", 1)[0] for tag in site.driver_tags}
        if len(branches) != 1:
            raise InputError(
                f"{site.source}: gpuOperator.driver.tags name several driver branches"
                f" ({', '.join(sorted(branches))})",
                hint="precompiled tags are <branch>-<kernel>-<os>, all of one branch",
            )
        return branches.pop()
    version = str((values.get("driver") or {}).get("version", ""))
    for tag in site.driver_tags:
        if not tag.startswith(f"{version}-"):
            raise InputError(
                f"{site.source}: gpuOperator.driver.tags {tag!r} is not {version}-<os>, the"
                f" tag chart {chart}'s driver version makes",
                hint=f"list the tags the operator pulls, e.g. {version}-ubuntu22.04",
            )
    return version


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def find_helm(explicit: Path | None = None) -> Path:
    """``--helm``, else $SEALIFT_HELM, else ``helm`` on PATH."""
    if explicit is not None:
        candidate: str | None = str(explicit)
    else:
        candidate = os.environ.get(HELM_ENV) or shutil.which("helm")
    if not candidate or not os.access(candidate, os.X_OK):
        raise ResourceError(
            f"helm was not found{f' at {candidate}' if candidate else ''}",
            hint=f"helm v3 renders the GPU Operator chart: install it, or set --helm/${HELM_ENV}",
        )
    return Path(candidate)


def helm_template(
    helm: Path,
    chart_archive: Path,
    *,
    release: str,
    namespace: str,
    values: dict[str, Any],
    kube_version: str | None = None,
) -> list[dict[str, Any]]:
    """Render the chart with ``helm template`` (CRDs included); return the objects."""
    with tempfile.TemporaryDirectory(prefix="sealift-helm-") as work:
        values_file = Path(work) / "values.yaml"
        values_file.write_text(yaml.safe_dump(values, sort_keys=True))
        command = [
            str(helm),
            "template",
            release,
            str(chart_archive),
            "--namespace",
            namespace,
            "--include-crds",
            "--values",
            str(values_file),
        ]
        if kube_version:
            command += ["--kube-version", kube_version]
        # Helm keeps caches and config in HOME; point them at the scratch folder so a render
        # never reads a user's repositories or reaches a network.
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": work,
            "HELM_CACHE_HOME": f"{work}/cache",
            "HELM_CONFIG_HOME": f"{work}/config",
            "HELM_DATA_HOME": f"{work}/data",
        }
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        detail = " ".join(done.stderr.strip().splitlines()[-1:]) or f"exit {done.returncode}"
        raise InputError(
            f"helm template of chart {chart_archive.name} failed: {detail}",
            hint="check the chart in the bundle and the site file's gpuOperator settings",
        )
    objects = [doc for doc in yaml.safe_load_all(done.stdout) if isinstance(doc, dict) and doc]
    return [
        o
        for o in objects
        if "helm.sh/hook" not in ((o.get("metadata") or {}).get("annotations") or {})
    ]


_WORKLOADS = {"Pod", "Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job"}


def pin_workload_images(objects: list[dict[str, Any]], matched: list[MirroredImage]) -> int:
    """Rewrite the chart's workload images from mirror tags to mirror digests; return how many.

    Kubelets pull for the life of the cluster; a digest cannot be moved, a tag can. Only the
    ClusterPolicy keeps tags, because the operator composes its images from them.
    """
    pins = {image.by_tag: image.by_digest for image in matched}
    count = 0

    def pin(container: dict[str, Any]) -> None:
        nonlocal count
        if container.get("image") in pins:
            container["image"] = pins[container["image"]]
            count += 1
        for variable in container.get("env") or []:
            if str(variable.get("name", "")).endswith("_IMAGE") and variable.get("value") in pins:
                variable["value"] = pins[variable["value"]]
                count += 1

    for obj in objects:
        if obj.get("kind") not in _WORKLOADS:
            continue
        spec = obj.get("spec") or {}
        pod = spec if obj["kind"] == "Pod" else (spec.get("template") or {}).get("spec") or {}
        for key in ("initContainers", "containers"):
            for container in pod.get(key) or []:
                pin(container)
    return count
