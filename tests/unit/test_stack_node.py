"""dev/stack/node.py and node_images.py: the node's configuration builders and its registry-free images.

Pure functions only; the node itself runs in tests/e2e/test_node_e2e.py."""

from __future__ import annotations

import hashlib
import io
import json
import sys
import tarfile
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "dev" / "stack"))
import kafka_broker
import kafka_cluster
import kafka_security
import node
import node_images
import pytest
import stack

PATHS = node.NodePaths(Path("/srv/kct/build/node-stack"))


def _props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))


def _members(archive: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def _blob(members: dict[str, bytes], digest: str) -> bytes:
    content = members[f"blobs/sha256/{digest.removeprefix('sha256:')}"]
    assert hashlib.sha256(content).hexdigest() == digest.removeprefix("sha256:")
    return content


def test_oci_archive_is_an_image_layout_containerd_names_after_the_reference() -> None:
    """Given a program's bytes
    When it is packed as an OCI archive
    Then the index names the image, and manifest, config and layer are blobs whose digests match, the
    layer holding the program, executable, at the entrypoint."""
    archive = node_images.oci_archive(binary=b"\x7fELF-program", entrypoint="/probe", reference="kct.dev/probe:k1")
    members = _members(archive)

    index = json.loads(members["index.json"])
    (descriptor,) = index["manifests"]
    assert descriptor["annotations"]["io.containerd.image.name"] == "kct.dev/probe:k1"
    manifest = json.loads(_blob(members, descriptor["digest"]))
    config = json.loads(_blob(members, manifest["config"]["digest"]))
    layer = _blob(members, manifest["layers"][0]["digest"])
    assert config["config"]["Entrypoint"] == ["/probe"]
    assert config["rootfs"]["diff_ids"] == [manifest["layers"][0]["digest"]]
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        (member,) = tar.getmembers()
        assert (member.name, member.mode) == ("probe", 0o755)
    assert json.loads(members["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}


def test_oci_archive_is_reproducible() -> None:
    """Given the same program twice
    When both are packed
    Then the archives are byte for byte the same (the image key names the content)."""
    first = node_images.oci_archive(binary=b"x", entrypoint="/pause", reference="kct.dev/pause:k")
    assert node_images.oci_archive(binary=b"x", entrypoint="/pause", reference="kct.dev/pause:k") == first


def test_containerd_config_has_what_this_machine_kind_needs() -> None:
    """Given the node's paths
    When containerd's configuration is built
    Then it is valid TOML in which CRI restricts oom_score_adj, runs runc with cgroupfs, uses the local pause
    image, and root, state, socket, `opt` and the CNI configuration are all under the node's state."""
    config = tomllib.loads(node.containerd_config(PATHS, "kct.dev/pause:k"))

    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["restrict_oom_score_adj"] is True
    assert cri["sandbox_image"] == "kct.dev/pause:k"
    assert cri["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is False
    assert cri["cni"] == {"bin_dir": node.CNI_BIN, "conf_dir": str(PATHS.cni_conf_dir), "max_conf_num": 1}
    owned = [config["root"], config["state"], config["grpc"]["address"],
             config["plugins"]["io.containerd.internal.v1.opt"]["path"]]
    assert all(Path(p).is_relative_to(PATHS.base) for p in owned)
    assert "io.containerd.snapshotter.v1.btrfs" in config["disabled_plugins"]


def test_kubelet_config_runs_on_cgroup_v1_without_systemd_under_its_own_cgroup_root() -> None:
    config = node.kubelet_config(PATHS, Path("/ca.crt"), Path("/resolv.conf"))

    assert config["failCgroupV1"] is False
    assert config["cgroupDriver"] == "cgroupfs"
    assert config["cgroupRoot"] == f"/{PATHS.cgroup_root}"
    assert config["clusterDNS"] == [node.CLUSTER_DNS]
    assert config["address"] == node.NODE_IP


def test_cgroup_root_is_per_state_directory() -> None:
    assert node.NodePaths(Path("/a/build/node-stack")).cgroup_root != PATHS.cgroup_root
    assert PATHS.cgroup_root == node.NodePaths(Path("/srv/kct/build/node-stack")).cgroup_root


def test_kube_proxy_leaves_the_machine_wide_conntrack_settings_alone() -> None:
    config = node.kube_proxy_config(Path("/kubeconfig"))

    assert config["conntrack"] == {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s",
                                   "tcpCloseWaitTimeout": "0s"}
    assert config["iptables"] == {"masqueradeAll": True}


def test_cluster_dns_service_points_at_coredns_on_the_node() -> None:
    """Given the DNS objects
    Then the kube-dns Service has the kubelet's clusterDNS address and no selector, and its one
    EndpointSlice is CoreDNS on the node's address, for UDP and TCP."""
    objects = {obj["kind"]: obj for obj in node.dns_objects()}

    service, slice_ = objects["Service"], objects["EndpointSlice"]
    assert service["spec"]["clusterIP"] == node.CLUSTER_DNS  # type: ignore[index]
    assert "selector" not in service["spec"]  # type: ignore[operator]
    assert slice_["metadata"]["labels"]["kubernetes.io/service-name"] == "kube-dns"  # type: ignore[index]
    assert slice_["endpoints"] == [{"addresses": [node.NODE_IP], "conditions": {"ready": True},
                                    "nodeName": node.NODE_NAME}]
    assert {p["protocol"] for p in slice_["ports"]} == {"UDP", "TCP"}  # type: ignore[attr-defined]
    assert f"bind {node.NODE_IP}" in node.corefile(Path("/kc"))


def test_broker_for_a_node_stack_has_a_listener_for_pods_advertised_as_such() -> None:
    """Given a pod listener on the node's address
    When the broker's properties are written
    Then it listens and advertises there as well as on loopback, and without one the loopback stack's
    properties are exactly what they were (a changed file would restart a running broker)."""
    def props(pod_listener: str | None) -> dict[str, str]:
        text = kafka_broker._server_properties(Path("/d"), "http://e", 29092, 29093, True, None, pod_listener)
        return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))

    with_pods, without = props("10.250.0.2:19094"), props(None)

    assert with_pods["advertised.listeners"] == "PLAINTEXT://127.0.0.1:29092,PODS://10.250.0.2:19094"
    assert with_pods["listeners"].endswith(",PODS://10.250.0.2:19094")
    assert "PODS:PLAINTEXT" in with_pods["listener.security.protocol.map"].split(",")
    assert without["advertised.listeners"] == "PLAINTEXT://127.0.0.1:29092"
    assert without["listener.security.protocol.map"] == "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"


def test_the_node_stacks_plugin_trusts_the_receiver_ca_file_over_https(monkeypatch: pytest.MonkeyPatch) -> None:
    """Given the receivers serve TLS by default, Then the node stack's plugin posts to an https endpoint and
    trusts the CA bundle file the e2e helpers and the demo write; a broker without one gets no such line."""
    monkeypatch.setattr(kafka_broker, "plugin_jar", lambda: Path("/plugin.jar"))  # the jar's build is not the point
    with_ca = kafka_broker._server_properties(Path("/d"), stack._node_telemetry_endpoint(), 29092, 29093, True, None,
                                              plugin_tls=kafka_broker.PluginTls(ca_file=Path("/state/receiver-ca.pem")))
    without = kafka_broker._server_properties(Path("/d"), "http://e", 29092, 29093, True, None)
    assert "kct.telemetry.tls.ca.file=/state/receiver-ca.pem" in with_ca.splitlines()
    assert "kct.telemetry.endpoint=https://telemetry-receiver.kct-telemetry.svc.cluster.local:4318/v1/metrics" \
        in with_ca.splitlines()
    assert "tls.ca.file" not in without
    assert stack._node_receiver_ca_file().name == "receiver-ca.pem"


def _node_cluster(state: Path = Path("/state"), *, secured: bool = True) -> kafka_cluster.Cluster:
    security = kafka_security.KafkaSecurity(Path("/state/kafka-security")) if secured else None
    return stack.node_kafka_cluster(state, security, "cid", first_port=29092, telemetry_endpoint="https://r/v1/metrics",
                                    token_file=Path("/state/telemetry-token"),
                                    plugin_ca_file=Path("/state/receiver-ca.pem"))


def test_the_node_stacks_kafka_is_three_nodes_each_on_ports_of_its_own() -> None:
    """Given the node stack's first Kafka port 29092
    When its cluster is described
    Then it is three combined nodes, ids 1..3, 10 ports apart on loopback (PLAINTEXT, controller, SASL_SSL, mTLS)
    and on the node's address for pods (PLAINTEXT, SASL_SSL), voting in one quorum; no port is used twice."""
    cluster = _node_cluster()

    assert [(n.node_id, n.port, n.controller_port) for n in cluster.nodes] == [
        (1, 29092, 29093), (2, 29102, 29103), (3, 29112, 29113)]
    assert [n.pod_listener for n in cluster.nodes] == ["10.250.0.2:19094", "10.250.0.2:19104", "10.250.0.2:19114"]
    secure = [n.secure for n in cluster.nodes]
    assert [(s.sasl_ssl_port, s.ssl_port, s.pod_sasl_ssl_listener) for s in secure if s is not None] == [
        (29094, 29095, "10.250.0.2:19095"), (29104, 29105, "10.250.0.2:19105"), (29114, 29115, "10.250.0.2:19115")]
    loopback = [p for n, s in zip(cluster.nodes, secure, strict=True) if s is not None
                for p in (n.port, n.controller_port, s.sasl_ssl_port, s.ssl_port)]
    assert len(set(loopback)) == len(loopback) == 12
    assert cluster.replication == 3 and cluster.jvm == stack.NODE_KAFKA_JVM


def test_every_node_advertises_its_own_loopback_and_pod_addresses_with_the_plugin(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Given the node stack's cluster
    When node 2's server.properties is written
    Then it listens and advertises its own addresses only (loopback for host clients through the forwarder, the
    node's address for pods, secured listeners beside them), joins the quorum of all three with replication 3,
    and its plugin posts with the stack's token and trusts the receivers' CA file, as on every node."""
    monkeypatch.setattr(kafka_broker, "plugin_jar", lambda: Path("/plugin.jar"))  # the jar's build is not the point
    cluster = _node_cluster()
    props = {i: _props(kafka_cluster.configuration(cluster, i)) for i in (1, 2, 3)}

    assert props[2]["advertised.listeners"] == (
        "PLAINTEXT://127.0.0.1:29102,PODS://10.250.0.2:19104,SASL_SSL://127.0.0.1:29104,SSL://127.0.0.1:29105,"
        "PODS_SASL://10.250.0.2:19105")
    assert props[2]["listeners"].startswith("PLAINTEXT://127.0.0.1:29102,CONTROLLER://127.0.0.1:29103,")
    assert props[2]["controller.quorum.voters"] == "1@127.0.0.1:29093,2@127.0.0.1:29103,3@127.0.0.1:29113"
    assert (props[2]["default.replication.factor"], props[2]["min.insync.replicas"]) == ("3", "2")
    for node_props in props.values():
        assert node_props["kct.telemetry.endpoint"] == "https://r/v1/metrics"
        assert node_props["kct.telemetry.token.file"] == "/state/telemetry-token"
        assert node_props["kct.telemetry.tls.ca.file"] == "/state/receiver-ca.pem"
        assert node_props["metric.reporters"] == kafka_broker.PLUGIN_CLASS


def test_the_node_stacks_env_lists_every_broker_for_the_host_and_for_pods() -> None:
    """Given the node stack's cluster, Then build/node-stack.env's bootstrap lists name all three brokers, by
    listener: loopback (the forwarder's ports) for the host, the node's address for pods."""
    env = stack.node_kafka_env(_node_cluster())

    assert env["KAFKA_BOOTSTRAP_SERVERS"] == "127.0.0.1:29092,127.0.0.1:29102,127.0.0.1:29112"
    assert env["KAFKA_SASL_SSL_BOOTSTRAP_SERVERS"] == "127.0.0.1:29094,127.0.0.1:29104,127.0.0.1:29114"
    assert env["KAFKA_SSL_BOOTSTRAP_SERVERS"] == "127.0.0.1:29095,127.0.0.1:29105,127.0.0.1:29115"
    assert env["KCT_NODE_KAFKA_POD_BOOTSTRAP"] == "10.250.0.2:19094,10.250.0.2:19104,10.250.0.2:19114"
    assert env["KCT_NODE_KAFKA_POD_SASL_SSL_BOOTSTRAP"] == "10.250.0.2:19095,10.250.0.2:19105,10.250.0.2:19115"
    assert env["KCT_KAFKA_CA_FILE"] == "/state/kafka-security/ca.crt"


def test_the_forwarder_serves_every_brokers_host_ports() -> None:
    """Given the node stack's cluster, Then the forwarder serves each broker's PLAINTEXT, SASL_SSL and mTLS port
    (not the controllers': only brokers talk to them, inside the namespace)."""
    assert stack.node_kafka_host_ports(_node_cluster()) == [29092, 29094, 29095, 29102, 29104, 29105,
                                                            29112, 29114, 29115]
    assert stack.node_kafka_host_ports(_node_cluster(secured=False)) == [29092, 29102, 29112]
