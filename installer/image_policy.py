"""No rendered object may run an image from outside the mirror.

Images hide in more places than ``containers[].image``: init and ephemeral containers, custom
resources such as the GPU Operator's ClusterPolicy ({repository, image, version} per component)
and operators' environment variables (``*_IMAGE``) that name the images they will start later.
Every one of them is found here and checked against the mirror before anything is applied.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sealift.errors import InputError
from sealift.installer.kube_cluster import object_label
from sealift.installer.mirror import MirrorTarget


@dataclass(frozen=True)
class ImageUse:
    """One image an object names, and where."""

    object_name: str
    where: str
    image: str


def _walk(node: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(node, dict):
        if node.get("enabled") is False:
            return  # a switched-off component of a custom resource runs nothing
        repository, image = node.get("repository"), node.get("image")
        if isinstance(repository, str) and isinstance(image, str):
            version = node.get("version", node.get("tag"))
            reference = f"{repository.rstrip('/')}/{image}"
            if version is not None:
                separator = "@" if str(version).startswith("sha256:") else ":"
                reference += f"{separator}{version}"
            yield path, reference
        elif isinstance(repository, str) and "tag" in node:
            yield path, f"{repository}:{node['tag']}"
        for key, value in node.items():
            child = f"{path}.{key}" if path else str(key)
            if key == "image" and isinstance(value, str) and not isinstance(repository, str):
                yield child, value
            elif key == "env" and isinstance(value, list):
                for item in value:
                    name = str(item.get("name", "")) if isinstance(item, dict) else ""
                    if name.endswith("_IMAGE") and isinstance(item.get("value"), str):
                        yield f"{child}[{name}]", item["value"]
            elif key in ("args", "command") and isinstance(value, list):
                for item in value:
                    if isinstance(item, str) and item.startswith("--image="):
                        yield child, item.removeprefix("--image=")
            else:
                yield from _walk(value, child)
    elif isinstance(node, list):
        for position, item in enumerate(node):
            yield from _walk(item, f"{path}[{position}]")


def image_uses(objects: list[dict[str, Any]]) -> list[ImageUse]:
    """Every image every object names."""
    uses: list[ImageUse] = []
    for obj in objects:
        name = object_label(obj)
        for where, image in _walk({k: v for k, v in obj.items() if k != "metadata"}, ""):
            uses.append(ImageUse(name, where, image))
    return uses


def in_mirror(image: str, mirror: MirrorTarget) -> bool:
    """Whether ``image`` is served by the mirror (host and prefix both match)."""
    host, _, path = image.partition("/")
    if host != mirror.registry or not path:
        return False
    return not mirror.prefix or path.startswith(mirror.prefix + "/")


def check_images(objects: list[dict[str, Any]], mirror: MirrorTarget, *, pinned: bool) -> int:
    """Refuse any image outside the mirror (and, with ``pinned``, any not pinned by digest).

    Returns how many image uses were checked.
    """
    uses = image_uses(objects)
    for use in uses:
        if not in_mirror(use.image, mirror):
            raise InputError(
                f"{use.object_name} {use.where} names image {use.image}, which is not in the"
                f" mirror {mirror}",
                hint="every image must come from the bundle through the mirror; nothing applied",
            )
        if pinned and "@sha256:" not in use.image:
            raise InputError(
                f"{use.object_name} {use.where} names image {use.image} by tag",
                hint="sealift's own objects pin images by digest; nothing was applied",
            )
    return len(uses)
