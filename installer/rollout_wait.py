"""Waits that end in "it serves" or in a reason a person can act on.

Each wait polls a check that returns None when done, or the current reason it is not: a Pending
pod with the scheduler's own message, an image that cannot be pulled, a prefetch that failed on
a node with its last message, a rollout that needs a spare GPU for maxSurge. The reason is shown
when it changes, and on timeout it is the error, with how long sealift waited.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sealift.errors import RemoteError, StallError
from sealift.installer.kube_cluster import KubeCluster
from sealift.installer.site_file import GPU_PRODUCT_LABEL, MIG_CONFIG_LABEL, MIG_STATE_LABEL
from sealift.progress import Progress

POLL_SECONDS = 2.0


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds}s"
    return f"{seconds // 60}m{seconds % 60:02d}s"


@dataclass(frozen=True)
class WaitResult:
    """What was waited for, and for how long."""

    what: str
    seconds: float


def wait_until(
    what: str,
    check: Callable[[], str | None],
    *,
    timeout: float,
    progress: Progress,
    hint: str,
    poll: float = POLL_SECONDS,
) -> WaitResult:
    """Poll ``check`` until it returns None; on timeout raise StallError with its last reason."""
    start = time.monotonic()
    last = ""
    # Start with short sleeps (a wait often ends within a second) and back off to ``poll``.
    pause = min(0.25, poll)
    while True:
        try:
            reason = check()
        except RemoteError as problem:
            # One failed API call must not end a wait of hours: it is the reason, for now.
            reason = problem.message
        waited = time.monotonic() - start
        if reason is None:
            progress.note(f"{what}: ready after {_duration(waited)}")
            return WaitResult(what, waited)
        if reason != last:
            progress.note(f"waiting for {what}: {reason}")
            last = reason
        if waited >= timeout:
            raise StallError(f"{what} not ready after {_duration(waited)}: {reason}", hint=hint)
        time.sleep(min(pause, max(timeout - waited, 0.05)))
        pause = min(pause * 2, poll)


def _get(obj: Any, *path: str) -> Any:
    for key in path:
        if obj is None:
            return None
        obj = obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)
    return obj


def pod_problem(pod: Any) -> str | None:
    """Why a pod is not ready, in the cluster's own words; None when it is ready."""
    name = f"pod {pod.metadata.name}"
    node = pod.spec.nodeName if pod.spec else None
    where = f" on node {node}" if node else ""
    status = pod.status
    conditions = {c.type: c for c in (status.conditions or [])} if status else {}
    scheduled = conditions.get("PodScheduled")
    if scheduled is not None and scheduled.status == "False":
        # The scheduler's preemption postscript repeats the counts; the first sentence says why.
        message = (scheduled.message or scheduled.reason or "").split(" preemption:")[0]
        return f"{name} is Pending: {message.rstrip('. ')}"
    for container in (status.containerStatuses or []) if status else []:
        state = container.state
        if state and state.waiting and state.waiting.reason not in (None, "ContainerCreating"):
            last = container.lastState.terminated if container.lastState else None
            detail = state.waiting.message or ""
            if last is not None and last.message:
                detail = f"last exit {last.exitCode}: {last.message.strip().splitlines()[-1]}"
            return f"{name}{where}: {state.waiting.reason}" + (f" ({detail})" if detail else "")
        if state and state.terminated:
            message = (state.terminated.message or "").strip().splitlines()
            return f"{name}{where} exited {state.terminated.exitCode}" + (
                f": {message[-1]}" if message else ""
            )
    ready = conditions.get("Ready")
    if ready is not None and ready.status == "True":
        return None
    phase = status.phase if status else "Unknown"
    return f"{name}{where} is {phase}, not ready yet"


def _pods(cluster: KubeCluster, namespace: str, selector: dict[str, str]) -> list[Any]:
    from lightkube.resources.core_v1 import Pod

    return list(cluster.list(Pod, namespace=namespace, labels=selector))


def rolled_out(deployment: Any) -> bool:
    """Every replica updated, ready and available, and no old one left."""
    spec, status = deployment.spec, deployment.status
    wanted = spec.replicas if spec.replicas is not None else 1
    if status is None or (status.observedGeneration or 0) < (deployment.metadata.generation or 0):
        return False
    counts = (
        status.updatedReplicas,
        status.readyReplicas,
        status.availableReplicas,
        status.replicas,
    )
    return all((count or 0) == wanted for count in counts)


def deployment_check(
    cluster: KubeCluster,
    namespace: str,
    name: str,
    *,
    surge_gpus: int = 0,
    product: str = "",
    since: datetime.datetime | None = None,
) -> Callable[[], str | None]:
    """Rolled out: every replica updated and ready, the old ones gone."""
    from lightkube.resources.apps_v1 import Deployment

    def check() -> str | None:
        deployment = cluster.get(Deployment, name, namespace)
        if deployment is None:
            return f"Deployment {namespace}/{name} does not exist"
        spec, status = deployment.spec, deployment.status
        wanted = spec.replicas if spec.replicas is not None else 1
        if status is None or (status.observedGeneration or 0) < (
            deployment.metadata.generation or 0
        ):
            return "the controller has not seen the new spec yet"
        for condition in status.conditions or []:
            # A deadline passed before this install applied its spec is history, not a verdict.
            stale = (
                since is not None
                and condition.lastUpdateTime is not None
                and (condition.lastUpdateTime < since)
            )
            if (
                condition.type == "Progressing"
                and condition.reason == "ProgressDeadlineExceeded"
                and not stale
            ):
                reason = f"the rollout of {name} exceeded its progress deadline"
                problem = _first_pod_problem(cluster, namespace, spec.selector.matchLabels)
                raise StallError(
                    f"{reason}: {problem or condition.message}",
                    hint="fix the cause and run install again",
                )
        for condition in status.conditions or []:
            # Pods refused at creation (an admission policy, a quota) leave no pod to explain.
            if condition.type == "ReplicaFailure" and condition.status == "True":
                return f"pods cannot be created: {condition.message or condition.reason}"
        updated, ready = status.updatedReplicas or 0, status.readyReplicas or 0
        available, total = status.availableReplicas or 0, status.replicas or 0
        if updated == wanted and ready == wanted and available == wanted and total == wanted:
            # Replaced pods may still be draining requests, on the old weights: wait for them.
            selector = spec.selector.matchLabels
            draining = [
                p for p in _pods(cluster, namespace, selector) if p.metadata.deletionTimestamp
            ]
            if not draining:
                return None
            return (
                f"{len(draining)} replaced pod(s) still draining, e.g. {draining[0].metadata.name}"
            )
        problem = _first_pod_problem(cluster, namespace, spec.selector.matchLabels)
        counts = f"{updated}/{wanted} new pods, {total - updated} old, {ready} ready"
        if problem and "Insufficient nvidia.com/gpu" in problem:
            if total - updated > 0:
                problem += (
                    f"; maxSurge 1 needs {surge_gpus} free GPUs on a {product or 'pool'} node for"
                    " the new pod while every old one keeps serving: free GPUs or add a node"
                )
            else:
                problem += (
                    f"; {wanted} replicas of {surge_gpus} GPUs do not fit in the pool's free GPUs:"
                    " add nodes, lower replicas or free GPUs"
                )
        elif problem and "node affinity" in problem:
            problem += (
                "; no schedulable node has this version's verified weights yet: check the"
                " prefetch DaemonSet"
            )
        return f"{counts}" + (f"; {problem}" if problem else "")

    return check


def _first_pod_problem(
    cluster: KubeCluster, namespace: str, selector: dict[str, str]
) -> str | None:
    pods = sorted(_pods(cluster, namespace, selector), key=lambda p: p.metadata.name)
    for pod in pods:
        if pod.metadata.deletionTimestamp is not None:
            continue
        problem = pod_problem(pod)
        pending = pod.status is not None and pod.status.phase == "Pending"
        if problem and pending and problem.endswith("not ready yet"):
            # No container state says why (a volume that cannot mount, a missing Secret):
            # the kubelet's last warning about the pod does.
            warning = last_warning(cluster, namespace, pod.metadata.name)
            if warning:
                problem = f"{problem}; {warning}"
        if problem:
            return problem
    return None


def last_warning(cluster: KubeCluster, namespace: str, pod: str) -> str:
    """The newest Warning event about a pod, as ``Reason: message``; "" when there is none."""
    from lightkube.resources.core_v1 import Event

    events = [
        e
        for e in cluster.list(Event, namespace=namespace, fields={"involvedObject.name": pod})
        if e.type == "Warning"
    ]
    if not events:
        return ""

    def when(event: Any) -> datetime.datetime:
        stamp = event.lastTimestamp or event.eventTime or event.metadata.creationTimestamp
        return stamp or datetime.datetime.min.replace(tzinfo=datetime.UTC)

    newest = max(events, key=when)
    return f"{newest.reason}: {(newest.message or '').strip()}"


def daemonset_check(
    cluster: KubeCluster,
    namespace: str,
    name: str,
    *,
    label: str,
    selector: dict[str, str],
    sole_value: str = "",
) -> Callable[[], str | None]:
    """Every node the DaemonSet runs on has an updated, ready agent and the weights label.

    With ``sole_value``, no other weights label with that value (another version of the same
    model) may remain: the agents have removed the old version.
    """
    from lightkube.resources.apps_v1 import DaemonSet
    from lightkube.resources.core_v1 import Node

    def check() -> str | None:
        daemonset = cluster.get(DaemonSet, name, namespace)
        if daemonset is None:
            return f"DaemonSet {namespace}/{name} does not exist"
        status = daemonset.status
        if status is None or (status.observedGeneration or 0) < (
            daemonset.metadata.generation or 0
        ):
            return "the controller has not seen the new spec yet"
        desired = status.desiredNumberScheduled or 0
        if desired == 0:
            wanted = ", ".join(f"{k}={v}" for k, v in selector.items())
            return f"no node carries {wanted} and tolerates the pool taint"
        updated, ready = status.updatedNumberScheduled or 0, status.numberReady or 0
        pods = _pods(cluster, namespace, daemonset.spec.selector.matchLabels)
        if updated < desired or ready < desired:
            problem = _first_pod_problem(cluster, namespace, daemonset.spec.selector.matchLabels)
            if problem and "not ready yet" in problem:
                problem += " (copying and verifying weights)"
            return f"{ready}/{desired} nodes ready, {updated} updated" + (
                f"; {problem}" if problem else ""
            )
        # The nodes the DaemonSet actually runs on (a node with another taint is not one).
        targets = {p.spec.nodeName for p in pods if p.spec and p.spec.nodeName}
        nodes = [n for n in cluster.list(Node, labels=selector) if n.metadata.name in targets]
        missing = sorted(n.metadata.name for n in nodes if label not in (n.metadata.labels or {}))
        if missing:
            return f"nodes without the weights label {label}: {', '.join(missing[:5])}"
        if sole_value:
            prefix = label.rpartition("/")[0] + "/"
            stale = sorted(
                n.metadata.name
                for n in nodes
                if any(
                    k.startswith(prefix) and k != label and v == sole_value
                    for k, v in (n.metadata.labels or {}).items()
                )
            )
            if stale:
                return f"nodes still holding an older version: {', '.join(stale[:5])}"
        return None

    return check


def mig_check(cluster: KubeCluster, pools: list[Any]) -> Callable[[], str | None]:
    """The MIG manager reports success on every node of every MIG pool."""
    from lightkube.resources.core_v1 import Node

    def check() -> str | None:
        for pool in pools:
            for node in cluster.list(Node, labels={MIG_CONFIG_LABEL: pool.mig_config}):
                state = (node.metadata.labels or {}).get(MIG_STATE_LABEL, "")
                if state != "success":
                    layout = f"MIG layout {pool.mig_config}"
                    return f"node {node.metadata.name}: {layout} is {state or 'pending'}"
        return None

    return check


def operator_check(
    cluster: KubeCluster,
    namespace: str,
    policy: Any,
    products: list[str],
    *,
    since: datetime.datetime | None = None,
) -> Callable[[], str | None]:
    """The operator's Deployments rolled out, ClusterPolicy ready, GPUs allocatable per pool."""
    from lightkube.resources.apps_v1 import Deployment
    from lightkube.resources.core_v1 import Node

    def check() -> str | None:
        for deployment in cluster.list(Deployment, namespace=namespace):
            problem = deployment_check(cluster, namespace, deployment.metadata.name, since=since)()
            if problem:
                return f"Deployment {namespace}/{deployment.metadata.name}: {problem}"
        if policy is not None:
            resource, name = policy
            found = cluster.get(resource, name)
            if found is None:
                return f"ClusterPolicy {name} does not exist"
            state = _get(found, "status", "state")
            if state != "ready":
                return f"ClusterPolicy {name} is {state or 'without status'}, not ready"
        for product in products:
            nodes = list(cluster.list(Node, labels={GPU_PRODUCT_LABEL: product}))
            if not nodes:
                return (
                    f"no node is labelled nvidia.com/gpu.product={product} (GPU Feature Discovery"
                    " labels GPU nodes once the operator runs)"
                )
            for node in nodes:
                allocatable = (node.status.allocatable or {}) if node.status else {}
                if str(allocatable.get("nvidia.com/gpu", "0")) in ("0", ""):
                    return f"node {node.metadata.name} has no allocatable nvidia.com/gpu yet"
        return None

    return check
