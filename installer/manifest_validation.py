"""Offline validation of every rendered object before it is written or applied.

Built-in kinds are checked strictly (unknown fields are errors) against the Kubernetes OpenAPI
schemas that kubernetes-validate ships; custom resources are checked against the
``openAPIV3Schema`` of the CRD that defines them, which is part of the same render (the GPU
Operator chart carries its CRDs). A custom resource whose CRD is neither rendered nor known is
an error: nothing reaches the cluster unchecked.
"""

from __future__ import annotations

from typing import Any

import jsonschema

from sealift.errors import InputError
from sealift.installer.kube_cluster import object_label

KUBERNETES_VERSION = "1.37.0"


def _path(parts: Any) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out.lstrip(".") or "(top level)"


def crd_schemas(objects: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> openAPIV3Schema, for every CRD among ``objects``."""
    schemas: dict[tuple[str, str], dict[str, Any]] = {}
    for obj in objects:
        if obj.get("kind") != "CustomResourceDefinition":
            continue
        spec = obj.get("spec") or {}
        group, kind = spec.get("group", ""), (spec.get("names") or {}).get("kind", "")
        for version in spec.get("versions") or []:
            schema = (version.get("schema") or {}).get("openAPIV3Schema")
            if schema is not None:
                schemas[(f"{group}/{version['name']}", kind)] = schema
    return schemas


def _structural(schema: Any) -> Any:
    """An OpenAPI v3 structural schema as JSON Schema: x-kubernetes-* extensions dropped."""
    if isinstance(schema, dict):
        preserve = schema.get("x-kubernetes-preserve-unknown-fields") is True
        int_or_string = schema.get("x-kubernetes-int-or-string") is True
        out = {k: _structural(v) for k, v in schema.items() if not k.startswith("x-kubernetes-")}
        if int_or_string:
            out.pop("type", None)
            out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
        if out.get("type") == "object" and "properties" in out and not preserve:
            out.setdefault("additionalProperties", False)
        if out.get("nullable") is True and "type" in out:
            out["type"] = [out["type"], "null"]
        out.pop("nullable", None)
        return out
    if isinstance(schema, list):
        return [_structural(item) for item in schema]
    return schema


def validate_objects(
    objects: list[dict[str, Any]],
    *,
    known_crds: dict[tuple[str, str], dict[str, Any]] | None = None,
    kubernetes_version: str = KUBERNETES_VERSION,
) -> int:
    """Validate every object; the first problem is one InputError naming the object and field."""
    import kubernetes_validate

    schemas = {**(known_crds or {}), **crd_schemas(objects)}
    for obj in objects:
        key = (str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
        if key in schemas:
            schema = _structural(schemas[key])
            body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
            properties = dict(schema.get("properties") or {})
            for skipped in ("apiVersion", "kind", "metadata"):
                properties.pop(skipped, None)
            schema = {**schema, "properties": properties}
            errors = sorted(
                jsonschema.Draft7Validator(schema).iter_errors(body),
                key=lambda e: len(list(e.absolute_path)),
            )
            if errors:
                error = errors[-1]
                raise InputError(
                    f"{object_label(obj)}: {_path(error.absolute_path)}: {error.message[:200]}",
                    hint="the rendered object does not match its CRD's schema; nothing was applied",
                )
            continue
        try:
            kubernetes_validate.validate(obj, kubernetes_version, strict=True)
        except kubernetes_validate.SchemaNotFoundError as missing:
            raise InputError(
                f"{object_label(obj)}: no schema for {key[0]} {key[1]}",
                hint="a custom resource needs its CRD in the same render; nothing was applied",
            ) from missing
        except kubernetes_validate.ValidationError as bad:
            raise InputError(
                f"{object_label(obj)}: {_path(bad.path)}: {bad.message[:200]}",
                hint=f"not valid Kubernetes {kubernetes_version}; nothing was applied",
            ) from bad
    return len(objects)
