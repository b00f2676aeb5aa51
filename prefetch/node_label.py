"""The node label that says "these verified weights are on this node's disk".

The prefetch agent sets one label per complete model version it holds, and removes the labels of
versions it has removed; vLLM pods require the label of the version they serve, so a pod never
starts on a node without its verified weights. The agent applies the labels server-side under a
field manager of its own (one per model), so the API server itself removes a label the agent
stops applying, and labels other managers own are never touched.

The agent's RBAC allows ``get`` and ``patch`` on nodes; a ValidatingAdmissionPolicy rendered with
it (see installer/stack_render.py) narrows that to this label prefix on the agent's own node.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from sealift.errors import InputError, RemoteError

LABEL_PREFIX = "weights.sealift.dev/"
FIELD_MANAGER_PREFIX = "sealift-prefetch-"
# Long enough to never collide between versions, short enough for a label name (63 characters).
_DIGEST_CHARS = 40


def weights_label(manifest_digest: str) -> str:
    """The label key for one model version, from its manifest digest."""
    hex_digest = manifest_digest.removeprefix("sha256:")
    if len(hex_digest) != 64 or any(c not in "0123456789abcdef" for c in hex_digest):
        raise InputError(f"{manifest_digest!r} is not a sha256 digest", hint="sha256:<64 hex>")
    return LABEL_PREFIX + hex_digest[:_DIGEST_CHARS]


def label_value(model_name: str) -> str:
    """The label's value: the model's name, which is readable in ``kubectl get nodes -L``."""
    return model_name[:63].rstrip("-._") or "model"


def complete_versions(dest: Path, model_name: str) -> list[str]:
    """Manifest digests of the complete (READY) versions of ``model_name`` under ``dest``."""
    from sealift.prefetch.model_store import ModelStore

    folder = dest / model_name
    if not folder.is_dir():
        return []
    # Only what the agent itself published counts: a READY record naming this very digest.
    return sorted(
        "sha256:" + entry.name
        for entry in folder.iterdir()
        if len(entry.name) == 64
        and ModelStore(dest, model_name, entry.name).ready_record() is not None
    )


def desired_labels(model_name: str, digests: Iterable[str]) -> dict[str, str]:
    """The labels a node holding these versions of ``model_name`` should carry."""
    return {weights_label(digest): label_value(model_name) for digest in digests}


def apply_node_labels(
    node_name: str, model_name: str, digests: Iterable[str], *, kubeconfig: Path | None = None
) -> dict[str, str]:
    """Server-side apply this model's weight labels to ``node_name``; return what was applied.

    Credentials come from the pod's service account (or KUBECONFIG, or ``kubeconfig``).
    """
    from lightkube import Client, KubeConfig
    from lightkube.core.exceptions import ApiError
    from lightkube.resources.core_v1 import Node
    from lightkube.types import PatchType

    labels = desired_labels(model_name, digests)
    try:
        config = KubeConfig.from_file(str(kubeconfig)) if kubeconfig else KubeConfig.from_env()
        client = Client(config=config, trust_env=False)
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node_name, "labels": labels},
        }
        client.patch(
            Node,
            node_name,
            body,
            patch_type=PatchType.APPLY,
            field_manager=FIELD_MANAGER_PREFIX + model_name,
            force=True,
        )
    except ApiError as problem:
        raise RemoteError(
            f"labelling node {node_name} with the weights of {model_name} was refused:"
            f" {problem.status.message}",
            hint="check the sealift-prefetch RBAC and admission policy, and NODE_NAME",
        ) from problem
    except Exception as problem:
        raise RemoteError(
            f"labelling node {node_name}: cannot reach the Kubernetes API ({problem})",
            hint="in a pod the service account token is used; by hand, set KUBECONFIG",
        ) from problem
    return labels


def node_name_from_env() -> str:
    """The node this agent runs on, from NODE_NAME (the downward API sets it)."""
    name = os.environ.get("NODE_NAME", "")
    if not name:
        raise InputError(
            "--label-node needs the node's name in NODE_NAME",
            hint="the DaemonSet sets it from spec.nodeName through the downward API",
        )
    return name


def describe(labels: dict[str, str]) -> str:
    """Labels as one log-friendly line."""
    return json.dumps(labels, sort_keys=True)
