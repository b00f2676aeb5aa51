"""The one Kubernetes API client of the installer: server-side apply under sealift's field manager.

Credentials come from KUBECONFIG (or ``--kubeconfig`` and ``--context``), exactly as kubectl reads
them, through lightkube. Objects are applied server-side with ``force``: the site file and the
bundle are the source of truth for the fields sealift sets (replicas among them, so an
autoscaler's value is taken back), and fields other managers own (a label someone added) are
left alone. Re-applying the same objects changes nothing on the server, so re-running install
changes nothing.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sealift.errors import InputError, RemoteError

FIELD_MANAGER = "sealift"


@dataclass(frozen=True)
class Applied:
    """One applied object: whether the server changed it."""

    kind: str
    namespace: str
    name: str
    changed: bool


def object_label(obj: dict[str, Any]) -> str:
    """``Kind namespace/name`` for messages."""
    meta = obj.get("metadata") or {}
    namespace = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{obj.get('kind', '?')} {namespace}{meta.get('name', '?')}"


def _content(obj: dict[str, Any]) -> dict[str, Any]:
    """An object without what the server rewrites on every write (its version, field owners).

    Some kinds (ValidatingAdmissionPolicy) get a new resourceVersion even from an identical
    apply, so "changed" compares content, not versions.
    """
    meta = {
        k: v
        for k, v in (obj.get("metadata") or {}).items()
        if k not in ("resourceVersion", "managedFields")
    }
    return {**{k: v for k, v in obj.items() if k != "status"}, "metadata": meta}


def _message(response: Any) -> str:
    """The API server's own words from an error response (a Status), else its body."""
    try:
        return str(response.json().get("message", response.text))
    except ValueError:
        return str(response.text)


def translate(what: str, problem: Exception) -> RemoteError:
    """An API or connection failure as the one-line error the CLI prints."""
    from lightkube.core.exceptions import ApiError

    if isinstance(problem, ApiError):
        status = problem.status
        return RemoteError(
            f"{what}: the API server refused it ({status.code} {status.reason}): {status.message}",
            hint="check your RBAC (cluster-admin is needed to install the GPU Operator)"
            if status.code in (401, 403)
            else "fix the cause above and run install again; it resumes where it stopped",
        )
    return RemoteError(
        f"{what}: cannot reach the Kubernetes API ({type(problem).__name__}: {problem})",
        hint="check the kubeconfig's server address, certificates and the network",
    )


class KubeCluster:
    """A connection to one cluster."""

    def __init__(self, kubeconfig: Path | None = None, context: str | None = None) -> None:
        from lightkube import Client, KubeConfig
        from lightkube.core.exceptions import ConfigError

        try:
            if kubeconfig is not None:
                config = KubeConfig.from_file(str(kubeconfig))
            else:
                config = KubeConfig.from_env()
            self._client = Client(
                config=config.get(context_name=context) if context else config,
                field_manager=FIELD_MANAGER,
            )
        except (ConfigError, OSError, KeyError, ValueError) as bad:
            where = str(kubeconfig) if kubeconfig else "KUBECONFIG"
            raise InputError(
                f"kubeconfig {where} cannot be used: {bad}",
                hint="point --kubeconfig or KUBECONFIG at a working kubeconfig (kubectl reads it)",
            ) from bad
        self._known_crds: set[str] = set()

    @property
    def client(self) -> Any:
        """The lightkube client (for the waits)."""
        return self._client

    def _call(self, what: str, action: Any) -> Any:
        try:
            return action()
        except (RemoteError, InputError):
            raise
        except Exception as problem:
            raise translate(what, problem) from problem

    def server_version(self) -> str:
        """The API server's version, e.g. ``1.37.2`` (helm renders charts for it)."""
        response = self._raw("GET /version", "GET", "/version")
        if response.status_code >= 300:
            raise RemoteError(
                f"GET /version: the API server answered {response.status_code}:"
                f" {_message(response)}",
                hint="check the kubeconfig's server address and credentials",
            )
        info: dict[str, Any] = response.json()
        return str(info.get("gitVersion", "")).lstrip("v").split("+")[0].split("-")[0]

    def _raw(self, what: str, method: str, path: str, **kwargs: Any) -> Any:
        """One request lightkube has no call for (/version, a dry run per call, impersonation),
        through lightkube's own authenticated httpx client; the response whatever its status.
        """
        return self._call(
            what, lambda: self._client._client._client.request(method, path, **kwargs)
        )

    def _resource(self, obj: dict[str, Any]) -> Any:
        from lightkube import codecs

        return codecs.from_dict(obj)

    def register_crds(self, objects: list[dict[str, Any]]) -> None:
        """Teach the client the custom resources the render defines."""
        from lightkube.generic_resource import create_resources_from_crd
        from lightkube.resources.apiextensions_v1 import CustomResourceDefinition

        for obj in objects:
            if obj.get("kind") == "CustomResourceDefinition":
                name = obj["metadata"]["name"]
                if name not in self._known_crds:
                    create_resources_from_crd(CustomResourceDefinition.from_dict(obj))
                    self._known_crds.add(name)

    def apply(self, obj: dict[str, Any]) -> Applied:
        """Server-side apply one object; report whether the server changed it."""
        from lightkube.core.exceptions import ApiError

        what = f"apply {object_label(obj)}"
        resource = self._call(what, lambda: self._resource(obj))
        meta = obj.get("metadata") or {}
        before: dict[str, Any] | None = None
        try:
            current = self._client.get(
                type(resource), meta["name"], namespace=meta.get("namespace")
            )
            before = _content(current.to_dict())
        except ApiError as problem:
            if problem.status.code != 404:
                raise translate(what, problem) from problem
        result = self._call(what, lambda: self._client.apply(resource, force=True))
        changed = before is None or _content(result.to_dict()) != before
        return Applied(obj["kind"], meta.get("namespace", ""), meta["name"], changed)

    def apply_all(self, objects: list[dict[str, Any]]) -> list[Applied]:
        """Apply in order: namespaces and CRDs first, so what follows can use them."""
        order = {"Namespace": 0, "CustomResourceDefinition": 1}
        ordered = sorted(objects, key=lambda o: order.get(str(o.get("kind")), 2))
        applied = []
        for obj in ordered:
            applied.append(self.apply(obj))
            if obj.get("kind") == "CustomResourceDefinition":
                self.register_crds([obj])
                self.wait_established(obj["metadata"]["name"])
        return applied

    def wait_established(self, name: str, timeout: float = 60.0) -> None:
        """A new CRD serves its kind only once Established; applying one before fails (404)."""
        from lightkube.resources.apiextensions_v1 import CustomResourceDefinition

        deadline = time.monotonic() + timeout
        while True:
            crd = self.get(CustomResourceDefinition, name)
            conditions = (crd.status.conditions or []) if crd and crd.status else []
            if any(c.type == "Established" and c.status == "True" for c in conditions):
                return
            if time.monotonic() > deadline:
                raise RemoteError(
                    f"CustomResourceDefinition {name} is not Established after {timeout:.0f}s",
                    hint="kubectl describe crd " + name,
                )
            time.sleep(0.2)

    def dry_run_pod_denial(self, obj: dict[str, Any]) -> str:
        """Why the API server refuses to create the Pod ``obj``; "" when it would (a dry run)."""
        meta = obj["metadata"]
        path = f"/api/v1/namespaces/{meta['namespace']}/pods"

        response = self._raw(
            f"dry-run create of {object_label(obj)}", "POST", path, params={"dryRun": "All"},
            content=json.dumps(obj), headers={"Content-Type": "application/json"},
        )  # fmt: skip
        return "" if response.status_code < 300 else _message(response)

    def denial_as(
        self, user: str, groups: list[str], extra: dict[str, str], node: str, labels: dict[str, str]
    ) -> str:
        """Why the API server refuses a label patch made as ``user``; "" when it would allow it.

        A server-side dry run with impersonation: nothing is changed. Used to prove that an
        admission policy is enforced before the rights it narrows are in use.
        """
        headers = [("Impersonate-User", user), ("Content-Type", "application/merge-patch+json")]
        headers += [("Impersonate-Group", group) for group in groups]
        headers += [(f"Impersonate-Extra-{quote(k, safe='')}", v) for k, v in extra.items()]
        body = json.dumps({"metadata": {"labels": labels}})

        response = self._raw(
            f"dry-run label patch of node {node} as {user}", "PATCH", f"/api/v1/nodes/{node}",
            params={"dryRun": "All"}, headers=headers, content=body,
        )  # fmt: skip
        return "" if response.status_code < 300 else _message(response)

    def get(self, kind: Any, name: str, namespace: str | None = None) -> Any | None:
        """An object, or None when it does not exist."""
        from lightkube.core.exceptions import ApiError

        try:
            return self._client.get(kind, name, namespace=namespace)
        except ApiError as problem:
            if problem.status.code == 404:
                return None
            raise translate(f"get {name}", problem) from problem
        except Exception as problem:
            raise translate(f"get {name}", problem) from problem

    def delete(self, kind: Any, name: str, namespace: str | None = None) -> None:
        """Delete an object; one already gone is fine."""
        from lightkube.core.exceptions import ApiError

        try:
            self._client.delete(kind, name, namespace=namespace)
        except ApiError as problem:
            if problem.status.code != 404:
                raise translate(f"delete {kind.__name__} {name}", problem) from problem
        except Exception as problem:
            raise translate(f"delete {kind.__name__} {name}", problem) from problem

    def list(self, kind: Any, **kwargs: Any) -> Iterator[Any]:
        """Objects of ``kind`` (label and field selectors as lightkube takes them)."""
        return iter(
            self._call(f"list {kind.__name__}", lambda: list(self._client.list(kind, **kwargs)))
        )
