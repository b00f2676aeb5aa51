"""Loading the YAML documents users write (bundle file, trust policy, site file) strictly.

YAML is parsed safely with duplicate keys refused (PyYAML would silently keep the last), then
validated against a JSON schema shipped in the package. Errors name the file, the key path and a
hint, in one line.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from sealift.errors import InputError


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate mapping keys."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    mapping: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in mapping:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        mapping[key] = loader.construct_object(value_node, deep=True)
    return mapping


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


@cache
def load_schema(package: str, name: str) -> dict[str, Any]:
    """A JSON schema shipped in ``package``'s ``schemas/`` folder."""
    text = resources.files(package).joinpath("schemas", name).read_text()
    schema: dict[str, Any] = json.loads(text)
    return schema


def key_path(path: Any) -> str:
    """``images[0].ref`` style rendering of a jsonschema error path."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _hint_for(error: jsonschema.ValidationError) -> str:
    if error.validator == "additionalProperties":
        allowed = sorted((error.schema.get("properties") or {}).keys())
        return "allowed keys here: " + ", ".join(allowed)
    if error.validator == "required":
        return "add the missing key"
    if error.validator == "const":
        return f"it must be {error.validator_value!r}"
    if error.validator == "pattern":
        return f"it must match {error.validator_value}"
    if error.validator == "not":
        return "these keys cannot be used together"
    if error.validator == "type":
        return f"it must be of type {error.validator_value}"
    return "see the schema " + str(error.schema.get("description", "")).strip()


def validate(document: Any, schema: dict[str, Any], *, source: str) -> None:
    """Validate ``document``; raise one InputError naming the first problem's key path."""
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(
        validator.iter_errors(document), key=lambda e: (list(e.absolute_path), e.message)
    )
    if not errors:
        return
    # The deepest error is the most precise one for a person to act on.
    error = max(errors, key=lambda e: len(e.absolute_path))
    path = list(error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = set((error.schema.get("properties") or {}).keys())
        extra = sorted(str(k) for k in error.instance if k not in allowed)
        if extra:
            path.append(extra[0])
    where = key_path(path)
    message = error.message
    if len(message) > 200:
        message = message[:200] + "..."
    raise InputError(f"{source}: {where}: {message}", hint=_hint_for(error))


def load_yaml(path: Path, *, what: str) -> Any:
    """Parse one YAML document strictly; a missing or malformed file is an InputError."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as missing:
        raise InputError(f"{what} {path} does not exist", hint="check the path") from missing
    except (OSError, UnicodeDecodeError) as bad:
        raise InputError(f"{what} {path} cannot be read: {bad}", hint="check the file") from bad
    try:
        return yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass
    except yaml.YAMLError as bad:
        mark = getattr(bad, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(bad, "problem", None) or str(bad)
        raise InputError(
            f"{what} {path}{where}: {problem}", hint="fix the YAML syntax at that line"
        ) from bad


def load_document(path: Path, *, package: str, schema_name: str, what: str) -> Any:
    """Load ``path`` as YAML and validate it against the named schema of ``package``."""
    document = load_yaml(path, what=what)
    validate(document, load_schema(package, schema_name), source=str(path))
    return document
