"""The reasons install gives when the cluster stalls, from pod states kwok cannot produce.

Pods are built from the same JSON the API server returns; the waits read them through the
same code that reads the live cluster.
"""

from __future__ import annotations

from typing import Any

import pytest
from lightkube.resources.core_v1 import Pod

from sealift.errors import StallError
from sealift.installer.rollout_wait import pod_problem, wait_until
from sealift.progress import Progress


def pod(status: dict[str, Any], node: str = "gpu-7") -> Any:
    return Pod.from_dict(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "sealift-prefetch-abcde", "namespace": "llm"},
            "spec": {"nodeName": node, "containers": [{"name": "prefetch", "image": "x"}]},
            "status": status,
        }
    )


def test_a_crash_looping_prefetch_names_the_node_and_its_last_error() -> None:
    message = (
        "fetching shards\nerror: model-00001-of-00002.safetensors does not match its digest"
        " after a second fetch (hint: the store holds a damaged object)\n"
    )
    problem = pod_problem(
        pod(
            {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "False"}],
                "containerStatuses": [
                    {
                        "name": "prefetch",
                        "ready": False,
                        "restartCount": 3,
                        "image": "x",
                        "imageID": "",
                        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                        "lastState": {"terminated": {"exitCode": 3, "message": message}},
                    }
                ],
            }
        )
    )
    assert problem is not None
    assert problem.startswith("pod sealift-prefetch-abcde on node gpu-7: CrashLoopBackOff")
    assert "last exit 3: error: model-00001-of-00002.safetensors does not match" in problem


def test_an_image_pull_failure_is_reported_with_the_kubelet_message() -> None:
    problem = pod_problem(
        pod(
            {
                "phase": "Pending",
                "containerStatuses": [
                    {
                        "name": "prefetch",
                        "ready": False,
                        "restartCount": 0,
                        "image": "x",
                        "imageID": "",
                        "state": {
                            "waiting": {
                                "reason": "ImagePullBackOff",
                                "message": 'Back-off pulling image "mirror/x@sha256:00"',
                            }
                        },
                    }
                ],
            }
        )
    )
    assert problem == (
        "pod sealift-prefetch-abcde on node gpu-7: ImagePullBackOff"
        ' (Back-off pulling image "mirror/x@sha256:00")'
    )


def test_a_pending_pod_gives_the_first_sentence_of_the_scheduler_message() -> None:
    message = (
        "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are"
        " available: 3 No preemption victims found for incoming pod."
    )
    problem = pod_problem(
        pod(
            {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": message,
                    }
                ],
            },
            node="",
        )
    )
    assert problem == (
        "pod sealift-prefetch-abcde is Pending: 0/3 nodes are available: 3 Insufficient"
        " nvidia.com/gpu"
    )


def test_a_ready_pod_has_no_problem() -> None:
    ready = pod({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]})
    assert pod_problem(ready) is None


def test_a_wait_times_out_with_its_last_reason_and_how_long_it_waited() -> None:
    reasons = iter(["copying", "copying", "verifying"] + ["verifying"] * 100)
    with pytest.raises(StallError) as caught:
        wait_until(
            "weights on every node",
            lambda: next(reasons),
            timeout=0.3,
            progress=Progress(mode="quiet"),
            hint="kubectl logs",
            poll=0.05,
        )
    assert caught.value.exit_code == 6
    assert caught.value.one_line().startswith("weights on every node not ready after 0s: ")
    assert caught.value.one_line().endswith("(hint: kubectl logs)")


def test_a_wait_returns_as_soon_as_the_check_passes() -> None:
    answers = iter(["not yet", None])
    result = wait_until(
        "x", lambda: next(answers), timeout=5, progress=Progress(mode="quiet"), hint="", poll=0.01
    )
    assert result.seconds < 5
