"""The mapping from resource attributes to a workload (kct.attribution.workload)."""

from __future__ import annotations

import pytest

from kct.attribution import index
from kct.attribution.workload import WORKLOAD_ATTRIBUTES, workload_of


@pytest.mark.parametrize(("attributes", "expected"), [
    # Given a ReplicaSet's pod under a Deployment (what the index writes), the Deployment names the workload.
    ({index.K8S_REPLICASET_NAME: "orders-7d9f", index.K8S_DEPLOYMENT_NAME: "orders"}, ("deployment", "orders")),
    # A bare ReplicaSet names itself.
    ({index.K8S_REPLICASET_NAME: "orders-7d9f"}, ("replicaset", "orders-7d9f")),
    # A CronJob's Job: the CronJob; a bare Job: the Job.
    ({index.K8S_JOB_NAME: "nightly-29000", index.K8S_CRONJOB_NAME: "nightly"}, ("cronjob", "nightly")),
    ({index.K8S_JOB_NAME: "backfill"}, ("job", "backfill")),
    ({index.K8S_STATEFULSET_NAME: "ledger"}, ("statefulset", "ledger")),
    ({index.K8S_DAEMONSET_NAME: "agent"}, ("daemonset", "agent")),
    # A rule that writes two: the precedence decides.
    ({index.K8S_STATEFULSET_NAME: "s", index.K8S_DEPLOYMENT_NAME: "d", index.K8S_DAEMONSET_NAME: "x"},
     ("deployment", "d")),
    ({index.K8S_DAEMONSET_NAME: "x", index.K8S_CRONJOB_NAME: "c"}, ("daemonset", "x")),
    # Unattributed: nothing, a namespace alone, or an empty name.
    ({}, None),
    ({index.K8S_NAMESPACE_NAME: "shop", "service.name": "orders"}, None),
    ({index.K8S_DEPLOYMENT_NAME: "", index.K8S_JOB_NAME: "j"}, ("job", "j")),
])
def test_workload_of_follows_the_owner_precedence(attributes: dict[str, str],
                                                  expected: tuple[str, str] | None) -> None:
    assert workload_of(attributes) == expected


def test_every_owner_attribute_the_index_writes_has_a_kind() -> None:
    # Given the attribute names the pod index writes for owners, every one is in the mapping, once.
    written = {index.K8S_DEPLOYMENT_NAME, index.K8S_STATEFULSET_NAME, index.K8S_DAEMONSET_NAME,
               index.K8S_JOB_NAME, index.K8S_CRONJOB_NAME, index.K8S_REPLICASET_NAME}
    keys = [key for key, _ in WORKLOAD_ATTRIBUTES]
    assert set(keys) == written and len(keys) == len(written)
