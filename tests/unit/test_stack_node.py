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
import node
import node_images
import pytest
import stack

PATHS = node.NodePaths(Path("/srv/kct/build/node-stack"))


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
