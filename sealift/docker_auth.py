"""Registry credentials from the files users already have: docker config.json and auth.json.

Looked up in the order podman and skopeo use: ``--authfile``, ``REGISTRY_AUTH_FILE``,
``$XDG_RUNTIME_DIR/containers/auth.json``, ``$DOCKER_CONFIG/config.json``,
``~/.docker/config.json``. Credential helpers (``credHelpers``/``credsStore``) are run as docker
runs them. A secret read here is held in memory only, never printed, logged or put in argv.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from sealift.errors import InputError


@dataclass(frozen=True)
class Credentials:
    """A username and secret for one registry. ``repr`` never shows the secret."""

    username: str
    password: str = field(repr=False)
    # An identity token (docker's OAuth refresh token) replaces the password in token requests.
    identity_token: str = field(default="", repr=False)


def auth_file_candidates(explicit: Path | None = None) -> list[Path]:
    """Paths searched for credentials, most specific first."""
    if explicit is not None:
        return [explicit]
    candidates: list[Path] = []
    if os.environ.get("REGISTRY_AUTH_FILE"):
        candidates.append(Path(os.environ["REGISTRY_AUTH_FILE"]))
    if os.environ.get("XDG_RUNTIME_DIR"):
        candidates.append(Path(os.environ["XDG_RUNTIME_DIR"]) / "containers" / "auth.json")
    if os.environ.get("DOCKER_CONFIG"):
        candidates.append(Path(os.environ["DOCKER_CONFIG"]) / "config.json")
    candidates.append(Path.home() / ".docker" / "config.json")
    return candidates


def _host_keys(registry: str) -> list[str]:
    keys = [registry, f"https://{registry}", f"http://{registry}", f"https://{registry}/v1/"]
    if registry == "docker.io":
        keys += ["index.docker.io", "https://index.docker.io/v1/"]
    return keys


def _from_helper(helper: str, registry: str, source: Path) -> Credentials | None:
    program = f"docker-credential-{helper}"
    try:
        result = subprocess.run(
            [program, "get"],
            input=registry.encode(),
            capture_output=True,
            timeout=30,
            check=False,
        )
    except FileNotFoundError as missing:
        raise InputError(
            f"{source} names credential helper {program!r}, which is not installed",
            hint=f"install {program} or remove it from {source}",
        ) from missing
    except (subprocess.TimeoutExpired, PermissionError) as stuck:
        raise InputError(
            f"credential helper {program} did not answer ({type(stuck).__name__})",
            hint="check the helper works: echo HOST | " + program + " get",
        ) from stuck
    if result.returncode != 0:
        return None  # The helper has nothing for this registry.
    try:
        answer = json.loads(result.stdout)
        return Credentials(username=str(answer["Username"]), password=str(answer["Secret"]))
    except (ValueError, KeyError, TypeError) as bad:
        raise InputError(
            f"credential helper {program} gave an answer sealift cannot read",
            hint="check the helper works: echo HOST | " + program + " get",
        ) from bad


def load_credentials(registry: str, *, auth_file: Path | None = None) -> Credentials | None:
    """Credentials for ``registry`` from the first auth file that has an entry for it."""
    for path in auth_file_candidates(auth_file):
        if not path.is_file():
            if auth_file is not None:
                raise InputError(f"auth file {path} does not exist", hint="check --authfile")
            continue
        try:
            config = json.loads(path.read_text())
            if not isinstance(config, dict):
                raise ValueError("not an object")
        except (OSError, ValueError) as bad:
            raise InputError(
                f"auth file {path} is not readable JSON", hint="fix or remove the file"
            ) from bad
        helper = (config.get("credHelpers") or {}).get(registry)
        if helper:
            return _from_helper(helper, registry, path)
        auths = config.get("auths") or {}
        for key in _host_keys(registry):
            entry = auths.get(key)
            if not entry:
                continue
            if entry.get("auth"):
                try:
                    username, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
                except (ValueError, UnicodeDecodeError) as bad:
                    raise InputError(
                        f"auth file {path}: the entry for {registry} is not base64 user:password",
                        hint="log in again with docker login or podman login",
                    ) from bad
                return Credentials(
                    username=username,
                    password=password,
                    identity_token=entry.get("identitytoken", ""),
                )
            if entry.get("identitytoken"):
                return Credentials(username="", password="", identity_token=entry["identitytoken"])
        if config.get("credsStore"):
            found = _from_helper(config["credsStore"], registry, path)
            if found:
                return found
    return None
