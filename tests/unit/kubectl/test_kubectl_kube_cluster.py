"""KubeCluster, the real implementation, against a stand-in API server on loopback: the URLs it calls, that
the user's credentials go in Authorization and the receiver's token in X-Kct-Read-Token, and its errors."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from stand_in_api_server import StandInApiServer, stand_in_api_server

from kct.kubectl.cluster import CrdMissing, Forbidden, KubeCluster, Unreachable, current_namespace

ROUTES: dict[str, tuple[int, Any]] = {
    "/apis/telemetry.kct.dev/v1alpha1/namespaces/kafka/telemetryreceivers":
        (200, {"items": [{"metadata": {"namespace": "kafka", "name": "telemetry"}}]}),
    "/apis/telemetry.kct.dev/v1alpha1/clientmetricssubscriptions": (404, {"message": "the server could not find"}),
    "/apis/telemetry.kct.dev/v1alpha1/namespaces/secret/telemetryreceivers": (403, {"message": "forbidden"}),
    "/api/v1/namespaces/kafka/secrets/telemetry-token":
        (200, {"kind": "Secret", "apiVersion": "v1", "metadata": {"name": "telemetry-token"},
               "data": {"token": base64.b64encode(b"s3cret\n").decode()}}),
    "/api/v1/namespaces/kafka/services/telemetry-receiver:4318/proxy/v1/clients": (200, {"clients": []}),
    "/api/v1/namespaces/kafka/pods/telemetry-receiver-a:4318/proxy/v1/clients": (200, {"clients": [1]}),
    "/api/v1/namespaces/kafka/endpoints/telemetry-receiver":
        (200, {"kind": "Endpoints", "apiVersion": "v1", "metadata": {"name": "telemetry-receiver"},
               "subsets": [{"addresses": [{"ip": "10.1.0.7",
                                           "targetRef": {"kind": "Pod", "name": "telemetry-receiver-a"}},
                                          {"ip": "10.1.0.8"}],
                            "notReadyAddresses": [{"ip": "10.1.0.9", "targetRef": {"kind": "Pod", "name": "starting"}}],
                            "ports": [{"port": 4318}]}]}),
    "/api/v1/namespaces/kafka/services/down-receiver:4318/proxy/v1/clients":
        (503, {"kind": "Status", "message": "no endpoints available for service \"down-receiver\""}),
    "/api/v1/namespaces/other/services/telemetry-receiver:4318/proxy/v1/clients":
        (403, {"kind": "Status", "message": "cannot get resource \"services/proxy\""}),
}


@pytest.fixture
def api_server() -> Iterator[StandInApiServer]:
    with stand_in_api_server(ROUTES) as served:
        yield served


@pytest.fixture
def kubeconfig(tmp_path: Path, api_server: StandInApiServer) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "c", "cluster": {"server": api_server.url}}],
        "users": [{"name": "u", "user": {"token": "user-token"}}],
        "contexts": [{"name": "test", "context": {"cluster": "c", "user": "u", "namespace": "kafka"}}],
    }))
    return path


def test_lists_reads_the_token_and_proxies_with_it_in_the_read_header(kubeconfig: Path,
                                                                    api_server: StandInApiServer) -> None:
    cluster = KubeCluster(str(kubeconfig))
    assert current_namespace(str(kubeconfig), None) == "kafka"
    assert cluster.list_objects("telemetryreceivers", "kafka")[0]["metadata"]["name"] == "telemetry"
    token = cluster.secret_value("kafka", "telemetry-token", "token")
    assert token == "s3cret"
    assert cluster.endpoint_pods("kafka", "telemetry-receiver") == ["telemetry-receiver-a"]  # ready pods only
    assert cluster.endpoint_pods("kafka", "absent") == []
    assert cluster.proxy_get("kafka", "pods", "telemetry-receiver-a", 4318, "/v1/clients", {}) == {"clients": [1]}
    answer = cluster.proxy_get("kafka", "services", "telemetry-receiver", 4318, "/v1/clients",
                               {"X-Kct-Read-Token": token})
    assert answer == {"clients": []}
    path, headers = api_server.seen[-1]
    assert path == "/api/v1/namespaces/kafka/services/telemetry-receiver:4318/proxy/v1/clients"
    assert headers["authorization"] == "Bearer user-token" and headers["x-kct-read-token"] == "s3cret"


def test_errors_name_what_is_missing_or_refused(kubeconfig: Path) -> None:
    cluster = KubeCluster(str(kubeconfig))
    with pytest.raises(CrdMissing, match=r"clientmetricssubscriptions\.telemetry\.kct\.dev CRD is not installed"):
        cluster.list_objects("clientmetricssubscriptions", None)
    with pytest.raises(Forbidden, match=r"may not list telemetryreceivers\.telemetry\.kct\.dev in namespace 'secret'"):
        cluster.list_objects("telemetryreceivers", "secret")
    with pytest.raises(Unreachable, match="down-receiver:4318/v1/clients: 503 no endpoints available"):
        cluster.proxy_get("kafka", "services", "down-receiver", 4318, "/v1/clients", {})
    with pytest.raises(Forbidden, match=r"may not proxy to Service other/telemetry-receiver \(services/proxy\)"):
        cluster.proxy_get("other", "services", "telemetry-receiver", 4318, "/v1/clients", {})
