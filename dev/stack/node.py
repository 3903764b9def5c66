"""One Kubernetes node for the local stack: containerd + runc over CRI, kubelet, kube-proxy, kube-scheduler,
CNI (bridge + host-local + loopback) and CoreDNS, all inside the node stack's own namespaces (netns.py).

Standard library only. The builders (`containerd_config`, `kubelet_config`, ...) are pure: they turn paths
into the components' configuration. `setup_namespace`, `up` and `down` do the I/O; `up` is called with the
namespaces entered, so every process it starts lives there. What this machine kind needs, and why:

- containerd's CRI `restrict_oom_score_adj = true`: without CAP_SYS_RESOURCE, raising a sandbox's
  oom_score_adj fails and no pod starts ("can't get final child's PID from pipe").
- cgroup v1 and no systemd: kubelet `failCgroupV1: false`, `cgroupDriver: cgroupfs`; the pods' cgroups go
  under a cgroup root of this node's own (`cgroupRoot`), removed by `down`.
- kubelet writes machine-wide sysctls (kernel.panic, vm.overcommit_memory, ...): in the node's private mount
  namespace, files bind-mounted over them take the writes instead.
- kube-proxy `conntrack.maxPerCore: 0` (the conntrack table size is machine-wide); `masqueradeAll`, because
  without br_netfilter a pod's reply to a Service client on the same bridge would bypass the un-DNAT.
- The node's address is on a veth (this kernel has no dummy device); both ends stay in the namespace.
- CoreDNS runs as a process on the node's address, behind a selector-less `kube-dns` Service.
"""

from __future__ import annotations

import calendar
import contextlib
import hashlib
import json
import os
import signal
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import _proc
import kube
import node_images

__all__ = [
    "CLUSTER_DNS",
    "COMPONENTS",
    "NODE_IP",
    "NODE_NAME",
    "PACKAGES",
    "NodePaths",
    "cni_conflist",
    "containerd_config",
    "corefile",
    "dns_objects",
    "down",
    "install",
    "kube_proxy_config",
    "kubelet_config",
    "load_image",
    "setup_namespace",
    "status",
    "up",
]

NODE_NAME = "kct-node"
NODE_IP = "10.250.0.2"
NODE_PREFIX = 24
VETH, VETH_PEER = "kct-node0", "kct-node1"
BRIDGE = "kct-br0"
POD_CIDR = "10.244.0.0/24"
CLUSTER_CIDR = "10.244.0.0/16"
CLUSTER_DNS = "10.96.0.10"
CLUSTER_DOMAIN = "cluster.local"
KUBELET_HEALTHZ_PORT = 10248
PROXY_HEALTHZ_PORT = 10256
SCHEDULER_PORT = 10259
COREDNS_READY_PORT = 18181

CONTAINERD, KUBELET, PROXY, SCHEDULER, COREDNS = "containerd", "kubelet", "kube-proxy", "kube-scheduler", "coredns"
COMPONENTS = (CONTAINERD, SCHEDULER, KUBELET, PROXY, COREDNS)  # start order; stopped in reverse

# File (absolute path, or a command on PATH) -> the Debian package that ships it.
PACKAGES = {
    "containerd": "containerd", "ctr": "containerd", "runc": "runc",
    "/usr/lib/cni/bridge": "containernetworking-plugins", "/usr/lib/cni/host-local": "containernetworking-plugins",
    "/usr/lib/cni/loopback": "containernetworking-plugins",
    "iptables-restore": "iptables",  # kube-proxy's iptables mode
    "nsenter": "util-linux", "unshare": "util-linux",
}
CNI_BIN = "/usr/lib/cni"
# What kubelet writes at start (pkg/kubelet/cm, setupKernelTunables): private copies in the node's mounts.
KUBELET_SYSCTLS = ("vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
                   "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes")


def install() -> None:
    """Debian packages the node needs (apt-get when missing) and its two local images (pause, probe)."""
    _proc.ensure_debian_packages(PACKAGES, why="the local stack's node: container runtime, CNI, kube-proxy")
    node_images.ensure_node_images()


@dataclass(frozen=True)
class NodePaths:
    state: Path

    @property
    def base(self) -> Path:
        return self.state / "node"

    @property
    def containerd_socket(self) -> Path:
        return self.base / "containerd" / "containerd.sock"

    @property
    def cni_conf_dir(self) -> Path:
        return self.base / "cni" / "net.d"

    @property
    def kubelet_root(self) -> Path:
        return self.base / "kubelet"

    @property
    def cgroup_root(self) -> str:
        """This node's cgroup parent: its pods' cgroups, apart from anyone else's, removable as a whole."""
        return "kct-" + hashlib.sha256(str(self.state.resolve()).encode()).hexdigest()[:10]


# -------------------------------------------------------------------------------------------- builders


def containerd_config(paths: NodePaths, sandbox_image: str) -> str:
    """containerd 1.6's config (version 2): its own root, state and socket; CRI with runc and our CNI."""
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return "\n".join([
        "version = 2",
        f'root = "{paths.base / "containerd" / "root"}"',
        f'state = "{paths.base / "containerd" / "state"}"',
        'disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", '
        '"io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]',
        "[grpc]", f'  address = "{paths.containerd_socket}"',
        "[ttrpc]", f'  address = "{paths.containerd_socket}.ttrpc"',
        # Its `opt` plugin would otherwise create /opt/containerd on the host.
        '[plugins."io.containerd.internal.v1.opt"]', f'  path = "{paths.base / "containerd" / "opt"}"',
        f"[{cri}]",
        f'  sandbox_image = "{sandbox_image}"',
        "  restrict_oom_score_adj = true",
        "  enable_selinux = false",
        f"[{cri}.containerd]",
        '  snapshotter = "overlayfs"', '  default_runtime_name = "runc"',
        f"[{cri}.containerd.runtimes.runc]", '  runtime_type = "io.containerd.runc.v2"',
        f"[{cri}.containerd.runtimes.runc.options]", "  SystemdCgroup = false", '  BinaryName = "runc"',
        f"[{cri}.cni]", f'  bin_dir = "{CNI_BIN}"', f'  conf_dir = "{paths.cni_conf_dir}"',
        "  max_conf_num = 1",
        "",
    ])


def cni_conflist(paths: NodePaths) -> dict[str, object]:
    """Pods on one bridge, addresses from host-local (its leases under the node's state, not /var/lib/cni)."""
    return {
        "cniVersion": "1.0.0",
        "name": "kct",
        "plugins": [{
            "type": "bridge", "bridge": BRIDGE, "isGateway": True, "hairpinMode": True,
            "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_CIDR}]], "routes": [{"dst": "0.0.0.0/0"}],
                     "dataDir": str(paths.base / "cni" / "ipam")},
        }],
    }


def kubelet_config(paths: NodePaths, ca_file: Path, resolv_conf: Path) -> dict[str, object]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": f"/{paths.cgroup_root}",
        "containerRuntimeEndpoint": f"unix://{paths.containerd_socket}",
        "address": NODE_IP, "port": 10250, "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1", "healthzPort": KUBELET_HEALTHZ_PORT,
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(ca_file)}},
        "authorization": {"mode": "Webhook"},
        "clusterDNS": [CLUSTER_DNS], "clusterDomain": CLUSTER_DOMAIN, "resolvConf": str(resolv_conf),
        "failSwapOn": False,
        "protectKernelDefaults": False,
        # A development machine's disk is often fuller than a node's defaults allow: evict only when nearly full.
        "evictionHard": {"memory.available": "50Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                         "nodefs.inodesFree": "1%"},
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "rotateCertificates": False, "serverTLSBootstrap": False,
        "registerNode": True,
        "podCIDR": POD_CIDR,
        # Mounted Secrets reach pods on the kubelet's pod sync (default 1 min): 10 s keeps a token rotation in
        # the tests ~50 s shorter; the rotation logic (grace period, re-read) is the same as with 1 min.
        "syncFrequency": "10s",
    }


def kube_proxy_config(kubeconfig: Path) -> dict[str, object]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "mode": "iptables",
        "hostnameOverride": NODE_NAME,
        "clusterCIDR": CLUSTER_CIDR,
        "bindAddress": NODE_IP,
        "healthzBindAddress": f"127.0.0.1:{PROXY_HEALTHZ_PORT}",
        "metricsBindAddress": "127.0.0.1:10249",
        # Zero: leave the machine-wide conntrack table size and timeouts alone.
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        "iptables": {"masqueradeAll": True},
    }


def corefile(kubeconfig: Path) -> str:
    """Cluster DNS only: there is no upstream resolver to forward other names to."""
    return (
        f".:53 {{\n    bind {NODE_IP}\n    errors\n    ready 127.0.0.1:{COREDNS_READY_PORT}\n"
        f"    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{\n"
        f"        kubeconfig {kubeconfig} kct-local\n        pods insecure\n"
        "        fallthrough in-addr.arpa ip6.arpa\n    }\n    cache 5\n}\n"
    )


def dns_objects() -> list[dict[str, object]]:
    """What CoreDNS may read, and the `kube-dns` Service whose one endpoint is CoreDNS on the node."""
    labels = {"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"}
    ports = [{"name": "dns", "port": 53, "protocol": "UDP"}, {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "kct:coredns"},
         "rules": [{"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"],
                    "verbs": ["list", "watch"]},
                   {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "kct:coredns"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kct:coredns"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "kct:coredns"}]},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": "kube-dns", "namespace": "kube-system", "labels": labels},
         "spec": {"clusterIP": CLUSTER_DNS, "ports": [{**p, "targetPort": 53} for p in ports]}},
        {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
         "metadata": {"name": "kube-dns-node", "namespace": "kube-system",
                      "labels": {"kubernetes.io/service-name": "kube-dns",
                                 "endpointslice.kubernetes.io/managed-by": "kct.dev-node"}},
         "addressType": "IPv4",
         "endpoints": [{"addresses": [NODE_IP], "conditions": {"ready": True}, "nodeName": NODE_NAME}],
         "ports": ports},
    ]


# ----------------------------------------------------------------------------------- namespace set-up


def _sh(*argv: str) -> str:
    return _proc.run(list(argv), tool="node", version=kube.KUBERNETES_VERSION)


def _cgroup_dirs(paths: NodePaths) -> list[Path]:
    """This node's cgroup root in every cgroup v1 hierarchy mounted under /sys/fs/cgroup."""
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()
              if " - cgroup " in line]
    return [Path(m) / paths.cgroup_root for m in mounts]


def _make_cgroup_root(paths: NodePaths) -> None:
    for directory in _cgroup_dirs(paths):
        directory.mkdir(exist_ok=True)
        if (directory.parent / "cpuset.cpus").exists():  # a new cpuset starts empty: give it its parent's
            for name in ("cpuset.cpus", "cpuset.mems"):
                (directory / name).write_text((directory.parent / name).read_text())


def _cgroup_v1_hierarchies() -> list[tuple[str, str]]:
    """(directory name, mount options) of each cgroup v1 hierarchy this process is in (/proc/self/cgroup)."""
    found = []
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _num, controllers, _path = line.split(":", 2)
        if controllers:  # `0::/` is the unified (v2) hierarchy: kubelet runs on v1 here
            name = controllers.removeprefix("name=")
            found.append((name, controllers if not controllers.startswith("name=") else f"none,{controllers}"))
    return found


def _mount_sys() -> None:
    """A sysfs of the node's network namespace (CNI and kubelet read its devices there), with the machine's
    cgroup v1 hierarchies mounted again under it: the same cgroups, seen from the node's mounts only."""
    hierarchies = _cgroup_v1_hierarchies()
    _sh("mount", "-t", "sysfs", "sysfs", "/sys")
    _sh("mount", "-t", "tmpfs", "-o", "mode=755", "cgroup", "/sys/fs/cgroup")
    for name, options in hierarchies:
        Path("/sys/fs/cgroup", name).mkdir(exist_ok=True)
        _sh("mount", "-t", "cgroup", "-o", options, "cgroup", f"/sys/fs/cgroup/{name}")


def _private_host_paths(paths: NodePaths) -> None:
    """Where containerd, CNI and kubelet write outside their configured directories, give them the node's own:
    /run (containerd's netns files in /run/netns, shim sockets, runc state) and /var/lib (kubelet's
    device-plugins socket, libcni's cache) become fresh tmpfs, gone with the namespace; /var/log (pod logs)
    is a directory of the node's state, kept for reading after `node-down`. Nothing the node's processes
    read lives under the host's /run or /var/lib (configuration is in /etc and the node's state)."""
    for target in ("/run", "/var/lib"):
        _sh("mount", "-t", "tmpfs", "-o", "mode=755", "kct-node", target)
    logs = paths.base / "var-log"
    logs.mkdir(parents=True, exist_ok=True)
    _sh("mount", "--bind", str(logs), "/var/log")
    # The node's own processes (the broker's plugin) resolve cluster names, as on a node whose resolver is
    # the cluster DNS; pods get theirs from kubelet (`resolvConf`), never this file.
    resolv = paths.base / "node-resolv.conf"
    resolv.write_text(f"nameserver {NODE_IP}\n")
    _sh("mount", "--bind", str(resolv), "/etc/resolv.conf")


def setup_namespace(paths: NodePaths) -> None:
    """Once per new holder, from inside its namespaces: loopback, the veth with the node's address, a
    default route (so Service addresses are routable, to be DNATed), /sys, private /run, /var/lib and
    /var/log, sysctl copies, the cgroup root."""
    _sh("ip", "link", "set", "lo", "up")
    _sh("ip", "link", "add", VETH, "type", "veth", "peer", "name", VETH_PEER)
    _sh("ip", "addr", "add", f"{NODE_IP}/{NODE_PREFIX}", "dev", VETH)
    _sh("ip", "link", "set", VETH_PEER, "up")
    _sh("ip", "link", "set", VETH, "up")
    _sh("ip", "route", "add", "default", "dev", VETH)
    _mount_sys()
    _private_host_paths(paths)
    copies = paths.base / "sysctl"
    copies.mkdir(parents=True, exist_ok=True)
    for name in KUBELET_SYSCTLS:
        source = Path("/proc/sys") / name
        if source.exists():
            copy = copies / name.replace("/", ".")
            copy.write_text(source.read_text())
            _sh("mount", "--bind", str(copy), str(source))
    _make_cgroup_root(paths)


# ------------------------------------------------------------------------------------------ processes


def _write_json(path: Path, value: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2) + "\n")
    return path


def _argv(paths: NodePaths, name: str, sandbox_image: str) -> list[str]:
    """Each component's command line; writes the configuration files it reads."""
    state, base = paths.state, paths.base
    if name == CONTAINERD:
        config = base / "containerd" / "config.toml"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(containerd_config(paths, sandbox_image))
        _write_json(paths.cni_conf_dir / "10-kct.conflist", cni_conflist(paths))
        return ["containerd", f"--config={config}"]
    if name == KUBELET:
        resolv = base / "resolv.conf"
        resolv.write_text(f"search {CLUSTER_DOMAIN}\n")
        config = _write_json(base / "kubelet-config.json",
                             kubelet_config(paths, state / "pki" / "ca.crt", resolv))
        kubeconfig = kube.ensure_kubeconfig(state, "kubelet", f"/O=system:nodes/CN=system:node:{NODE_NAME}")
        return [str(kube.kube_bin_dir() / KUBELET), f"--config={config}", f"--kubeconfig={kubeconfig}",
                f"--root-dir={paths.kubelet_root}", f"--cert-dir={base / 'kubelet-certs'}",
                f"--hostname-override={NODE_NAME}", f"--node-ip={NODE_IP}", "--v=1"]
    if name == PROXY:
        kubeconfig = kube.ensure_kubeconfig(state, "kube-proxy", "/CN=system:kube-proxy")
        config = _write_json(base / "kube-proxy-config.json", kube_proxy_config(kubeconfig))
        return [str(kube.kube_bin_dir() / PROXY), f"--config={config}", "--v=1"]
    if name == SCHEDULER:
        kubeconfig = kube.ensure_kubeconfig(state, "kube-scheduler", "/CN=system:kube-scheduler")
        return [str(kube.kube_bin_dir() / SCHEDULER), f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}",
                "--authentication-skip-lookup=true", "--bind-address=127.0.0.1",
                f"--secure-port={SCHEDULER_PORT}", "--leader-elect=false", "--v=1"]
    if name == COREDNS:
        kubeconfig = kube.ensure_kubeconfig(state, "coredns", "/CN=kct:coredns")
        config = base / "Corefile"
        config.write_text(corefile(kubeconfig))
        return [str(kube.coredns_bin()), "-conf", str(config)]
    raise ValueError(name)


def _ctr(paths: NodePaths, *args: str) -> str:
    return _sh("ctr", f"--address={paths.containerd_socket}", "--namespace=k8s.io", *args)


def _http_ok(url: str) -> bool:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # loopback health check of a self-signed serving certificate
    with urllib.request.urlopen(url, timeout=2, context=ctx) as resp:
        return bool(resp.status == 200)


def _kubectl(state: Path, *args: str, stdin: str | None = None) -> str:
    proc = subprocess.run(["kubectl", f"--kubeconfig={state / 'kubeconfig'}", *args], input=stdin,
                          capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def _node_ready(state: Path, since: float) -> bool:
    """Ready, as reported by this kubelet: the Node object outlives a restart (it is in etcd) with the Ready
    condition of the previous run, so a heartbeat from before `since` (this kubelet's start) does not count."""
    node = json.loads(_kubectl(state, "get", "node", NODE_NAME, "-o", "json"))
    ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    beat = calendar.timegm(time.strptime(ready["lastHeartbeatTime"], "%Y-%m-%dT%H:%M:%SZ"))
    return bool(ready["status"] == "True" and beat >= int(since))


def _start(paths: NodePaths, name: str, sandbox_image: str, ready: Callable[[], bool], timeout: float) -> None:
    with _proc.step(f"node: {name}"):
        if not _proc.is_running(paths.state, name):
            _proc.start_daemon(paths.state, name, _argv(paths, name, sandbox_image))
        _proc.wait_until(ready, timeout=timeout, what=name, log=paths.state / "logs" / f"{name}.log",
                         alive=lambda: _proc.is_running(paths.state, name))


def load_image(state: Path, archive: Path, reference: str) -> None:
    """Import an image archive (OCI layout or docker-archive) into the node's containerd, unless present.
    Called with the node stack's namespaces entered."""
    paths = NodePaths(state.resolve())
    if reference not in set(_ctr(paths, "images", "list", "--quiet").split()):
        with _proc.step(f"node: import {reference}"):
            _ctr(paths, "images", "import", str(archive))


def _import_images(paths: NodePaths, images: dict[str, node_images.NodeImage]) -> None:
    for image in images.values():
        load_image(paths.state, image.archive, image.reference)


def up(state: Path) -> dict[str, str]:
    """Start (or reuse) the node's components, from inside the node stack's namespaces, with its control
    plane already up; returns once the node is Ready, kube-proxy has synced and cluster DNS answers."""
    paths = NodePaths(state.resolve())
    images = node_images.ensure_node_images()
    pause = images["pause"].reference
    _start(paths, CONTAINERD, pause, lambda: bool(_ctr(paths, "version")), 30)
    _import_images(paths, images)
    _start(paths, SCHEDULER, pause, lambda: _http_ok(f"https://127.0.0.1:{SCHEDULER_PORT}/healthz"), 60)
    # A kubelet started now posts a fresh status at once; one already running is taken as it reports.
    since = 0.0 if _proc.is_running(paths.state, KUBELET) else time.time()
    _start(paths, KUBELET, pause, lambda: _node_ready(paths.state, since), 120)
    _start(paths, PROXY, pause, lambda: _http_ok(f"http://127.0.0.1:{PROXY_HEALTHZ_PORT}/healthz"), 60)
    _kubectl(paths.state, "apply", "--server-side", "-f", "-",
             stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": dns_objects()}))
    _start(paths, COREDNS, pause, lambda: _http_ok(f"http://127.0.0.1:{COREDNS_READY_PORT}/ready"), 60)
    return {
        "KCT_NODE_NAME": NODE_NAME, "KCT_NODE_IP": NODE_IP,
        "KCT_NODE_PROBE_IMAGE": images["probe"].reference, "KCT_NODE_PROBE_BINARY": str(images["probe"].binary),
        "KCT_NODE_CONTAINERD_SOCKET": str(paths.containerd_socket),
    }


# ------------------------------------------------------------------------------------------------ down


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def _shims(paths: NodePaths) -> list[int]:
    """containerd's shims for this node's containerd (its socket is on their command line)."""
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if argv[0].endswith(b"containerd-shim-runc-v2") and str(paths.containerd_socket).encode() in argv:
                found.append(int(entry.name))
    return found


def _kill_pods(paths: NodePaths) -> int:
    """SIGKILL every container process of this node (the shims' descendants), then the shims: they are
    started detached by containerd, so stopping containerd leaves them running."""
    tree, shims = _children(), _shims(paths)
    victims: list[int] = []
    pending = list(shims)
    while pending:
        pid = pending.pop()
        victims.append(pid)
        pending.extend(tree.get(pid, []))
    for pid in reversed(victims):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return len(victims) - len(shims)


def _remove_cgroup_root(paths: NodePaths) -> None:
    for directory in _cgroup_dirs(paths):
        for _attempt in range(20):
            if not directory.exists():
                break
            for sub in sorted((p for p in directory.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                with contextlib.suppress(OSError):
                    sub.rmdir()
            with contextlib.suppress(OSError):
                directory.rmdir()
            if directory.exists():
                time.sleep(0.25)


def down(state: Path) -> None:
    """Stop the node's components, its pods and their shims; remove its cgroup root."""
    paths = NodePaths(state.resolve())
    for name in reversed(COMPONENTS):
        if name == CONTAINERD:
            killed = _kill_pods(paths)
            if killed:
                print(f"==> killed {killed} container processes", flush=True)
        if _proc.stop_daemon(paths.state, name):
            print(f"==> stopped {name}", flush=True)
    _remove_cgroup_root(paths)


def status(state: Path) -> list[str]:
    lines = []
    for name in COMPONENTS:
        pid = _proc.read_pid(state, name)
        running = _proc.is_running(state, name)
        lines.append(f"{name:<24} pid {pid if running else '-':<8} {'running' if running else 'stopped':<8} "
                     f"node {NODE_NAME} ({NODE_IP})")
    return lines
