"""Image references: ``[host[:port]/]repository[:tag][@digest]``, parsed the way docker does."""

from __future__ import annotations

import re
from dataclasses import dataclass

from sealift.errors import InputError
from sealift.hashing import check_digest

DEFAULT_REGISTRY = "docker.io"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*"
_REPOSITORY = re.compile(rf"^{_COMPONENT}(?:/{_COMPONENT})*$")
_TAG = re.compile(r"^[\w][\w.-]{0,127}$")


@dataclass(frozen=True)
class ImageReference:
    """A parsed reference; ``registry`` is empty for bundle-local names such as ``vllm/x:1``."""

    registry: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    @property
    def name(self) -> str:
        """``repository:tag`` (or ``repository@digest``): the name inside a bundle or mirror."""
        if self.tag:
            return f"{self.repository}:{self.tag}"
        if self.digest:
            return f"{self.repository}@{self.digest}"
        return self.repository

    @property
    def reference(self) -> str:
        """What to ask the registry for: the digest when pinned, else the tag."""
        return self.digest or self.tag or "latest"

    def __str__(self) -> str:
        text = f"{self.registry}/{self.repository}" if self.registry else self.repository
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            text += f"@{self.digest}"
        return text


def looks_like_host(part: str) -> bool:
    """Whether the first path component of a reference is a registry host, as Docker decides."""
    return "." in part or ":" in part or part == "localhost"


def parse_reference(
    text: str, *, what: str = "image reference", local: bool = False
) -> ImageReference:
    """Parse ``text``; with ``local`` the reference names no registry (a name inside a bundle)."""
    hint = "write it as host[:port]/repository[:tag][@sha256:...]"
    if local:
        hint = "write it as repository[:tag], e.g. vllm/vllm-openai:v0.28.0"
    if not text or text != text.strip():
        raise InputError(f"{what} {text!r} is empty or has spaces", hint=hint)
    rest, digest = text, None
    if "@" in rest:
        rest, digest = rest.split("@", 1)
        check_digest(digest, what=f"{what} {text!r} digest")
    registry = ""
    first, _, remainder = rest.partition("/")
    if remainder and looks_like_host(first):
        registry, rest = first, remainder
    elif not local:
        registry = DEFAULT_REGISTRY
        if "/" not in rest:
            rest = f"library/{rest}"
    if local and registry:
        raise InputError(f"{what} {text!r} names a registry ({registry})", hint=hint)
    tag = None
    repository = rest
    slash = rest.rfind("/")
    colon = rest.rfind(":")
    if colon > slash:
        repository, tag = rest[:colon], rest[colon + 1 :]
        if not _TAG.match(tag):
            raise InputError(f"{what} {text!r} has an invalid tag {tag!r}", hint=hint)
    if not _REPOSITORY.match(repository):
        raise InputError(
            f"{what} {text!r} has an invalid repository {repository!r}",
            hint=hint + " (lower case letters, digits, '.', '_', '-' and '/')",
        )
    if tag is None and digest is None:
        tag = "latest"
    return ImageReference(registry=registry, repository=repository, tag=tag, digest=digest)
