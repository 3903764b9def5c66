"""Local Debian bookworm bases that stand in for the official images the Dockerfile starts FROM.

There is no registry of container images here (only Debian's, PyPI, Maven Central, ...), so the bases
are bootstrapped from Debian packages with mmdebstrap, committed with buildah and cached as docker-archive
tarballs under `~/.cache/kct/images/bases/`, keyed by a hash of their recipe. They change rarely, so they
are cached apart from the images built on them. One `BaseSpec` describes one base; a base for another
stage (a JDK + Spark base for the `spark` stage) is one more `BaseSpec` with its packages and, if it needs
files that are not Debian packages, its `customize` hooks.

Like the official slim images, the bases are `minbase` plus the named packages, without manual pages,
documentation (copyright files stay) or translations, and without apt's package lists.

**Trust.** This machine reaches the registries through a TLS-intercepting egress whose CA the host trusts
(`/usr/local/share/ca-certificates/`). Python's pip in a build step uses the system CA bundle, which the
image build bind-mounts from the host for RUN steps only, so shipped images carry Debian's CAs alone. Java
reads its own keystore, which a mount cannot replace without leaving a mount point behind in every stage;
so a base that only builds (`ships=False`: the Maven base) has the host's extra CAs installed, and the key
covers them.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "BASES",
    "MAVEN_BASE",
    "PYTHON_BASE",
    "PYTHON_BUILD_BASE",
    "SPARK_BASE",
    "SPARK_VERSION",
    "BaseBuild",
    "BaseSpec",
    "BootstrapError",
    "bootstrap_rootfs",
    "debian_sources",
    "host_extra_cas",
]

# Bump when the bootstrap recipe below changes in a way the spec fields do not show.
RECIPE_VERSION = "1"

# Like the official slim images: no manual pages, docs or translations (copyright files stay).
_DPKG_EXCLUDES = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/lintian/*",
)

_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class BootstrapError(RuntimeError):
    """A base could not be bootstrapped; the message names the base and the failing step."""


@dataclass(frozen=True)
class BaseSpec:
    """One local base image: Debian `suite` minbase plus `packages`, with the given image config."""

    name: str                 # short name: kct.dev/base/<name>-<suite>:<key>
    stands_for: str           # the official image the Dockerfile names by default
    packages: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    cmd: tuple[str, ...] = ()
    workdir: str = "/"
    entrypoint: tuple[str, ...] = ()
    user: str = ""
    # False for bases that only build (their stages are not shipped): they trust the host's extra CAs.
    ships: bool = True
    # Extra mmdebstrap --customize-hook commands (run on the host with the root filesystem as $1), for what
    # is not a Debian package. The files they read are listed in `inputs` (the key covers their content) and
    # found under "$KCT_BASE_INPUTS/<file name>", so no host path enters the key.
    customize: tuple[str, ...] = ()
    inputs: tuple[Path, ...] = ()
    suite: str = "bookworm"
    variant: str = "minbase"

    @property
    def repository(self) -> str:
        return f"kct.dev/base/{self.name}-{self.suite}"

    def recipe(self) -> dict[str, object]:
        """Everything that decides the base's content, as data (what the key hashes)."""
        return {
            "recipe": RECIPE_VERSION,
            "suite": self.suite,
            "variant": self.variant,
            "packages": sorted(self.packages),
            "dpkg": list(_DPKG_EXCLUDES),
            "env": [list(pair) for pair in self.env],
            "cmd": list(self.cmd),
            "workdir": self.workdir,
            "customize": list(self.customize),
            "inputs": {str(p.name): _sha256(p) for p in self.inputs},
            "extra_cas": {} if self.ships else {p.name: _sha256(p) for p in host_extra_cas()},
            # Only when set, so the keys of the bases without them stay what they were.
            **({"entrypoint": list(self.entrypoint)} if self.entrypoint else {}),
            **({"user": self.user} if self.user else {}),
        }

    def key(self) -> str:
        return hashlib.sha256(json.dumps(self.recipe(), sort_keys=True).encode()).hexdigest()[:16]

    def reference(self) -> str:
        return f"{self.repository}:{self.key()}"


PYTHON_BASE = BaseSpec(
    name="python",
    stands_for="python:3.11.x-slim-bookworm (PYTHON_IMAGE)",
    # Debian's python3 is 3.11, the package's floor. python-is-python3: the Dockerfile calls `python`;
    # ca-certificates, netbase and tzdata: what the official slim image adds to debian:bookworm-slim.
    packages=("python3", "python3-venv", "python-is-python3", "ca-certificates", "netbase", "tzdata"),
    env=(("PATH", _PATH), ("LANG", "C.UTF-8")),
    cmd=("python3",),
)

PYTHON_BUILD_BASE = BaseSpec(
    name="python-build",
    stands_for="python:3.11.x-bookworm (PYTHON_BUILD_IMAGE)",
    # The build stage compiles the receiver's C extension (setup.py): the same python3 as PYTHON_BASE (the
    # venv built here runs there) plus a C compiler and the Python headers, as the official non-slim image has.
    packages=(*PYTHON_BASE.packages, "gcc", "libc6-dev", "python3-dev"),
    env=(("PATH", _PATH), ("LANG", "C.UTF-8")),
    cmd=("python3",),
    ships=False,
)

MAVEN_BASE = BaseSpec(
    name="maven",
    stands_for="maven:3.9.x-eclipse-temurin-17 (MAVEN_IMAGE)",
    # Debian's maven is 3.8; the plugin's build needs Maven >= 3.6.3 and a JDK 17.
    packages=("openjdk-17-jdk-headless", "maven", "ca-certificates", "netbase"),
    env=(("PATH", _PATH), ("LANG", "C.UTF-8"), ("JAVA_HOME", "/usr/lib/jvm/java-17-openjdk-amd64"),
         ("MAVEN_HOME", "/usr/share/maven")),
    cmd=("mvn",),
    ships=False,
)

# The Spark release of the job image; the pyspark pin in pyproject.toml and the Dockerfile's SPARK_VERSION
# name the same one (tests/unit/packaging/test_dockerfile.py).
SPARK_VERSION = "4.2.0"
_PY4J_VERSION = "0.10.9.9"   # what pyspark SPARK_VERSION requires
_SITE = "/usr/local/lib/python3.11/dist-packages"   # Debian python3's place for locally installed packages
_JAVA_HOME = "/usr/lib/jvm/java-17-openjdk-amd64"

SPARK_BASE = BaseSpec(
    name="spark",
    stands_for=f"apache/spark:{SPARK_VERSION}-scala2.13-java21-python3-ubuntu (SPARK_IMAGE)",
    # Spark 4 runs on Java 17 or 21 (bookworm has 17); python3 (3.11) is the kct package's floor, pip is what
    # the Dockerfile's spark stage installs the job's libraries with; procps for Spark's scripts.
    packages=("openjdk-17-jre-headless", "python3", "python3-pip", "procps", "ca-certificates", "netbase",
              "tzdata"),
    env=(("PATH", f"{_PATH}:/opt/spark/bin"), ("LANG", "C.UTF-8"), ("JAVA_HOME", _JAVA_HOME),
         ("SPARK_HOME", "/opt/spark")),
    workdir="/opt/spark/work-dir",
    entrypoint=("/opt/entrypoint.sh",),
    user="185",
    # Spark's distribution is the pyspark package from PyPI (its jars are the release's jars, Kubernetes
    # support included), installed by the host's pip (pure Python and jars; the bootstrap has no network of
    # its own). The official image's layout: SPARK_HOME=/opt/spark with bin/ and jars/ (the Dockerfile copies
    # the Kafka connector there), user spark (185), the work dir writable by it, our own entrypoint for the
    # driver and executor commands Spark on Kubernetes runs.
    customize=(
        f'python3 -m pip install --quiet --no-compile --no-deps --disable-pip-version-check '
        f'--target "$1{_SITE}" pyspark=={SPARK_VERSION} py4j=={_PY4J_VERSION}',
        f'mkdir -p "$1/opt/spark/work-dir" && for d in bin sbin jars; do '
        f'mv "$1{_SITE}/pyspark/$d" "$1/opt/spark/$d" && ln -s "/opt/spark/$d" "$1{_SITE}/pyspark/$d"; done',
        'install -m 0755 "$KCT_BASE_INPUTS/spark-entrypoint.sh" "$1/opt/entrypoint.sh"',
        'chroot "$1" groupadd --system --gid 185 spark',
        'chroot "$1" useradd --system --uid 185 --gid spark --home-dir /opt/spark --no-create-home '
        '--shell /usr/sbin/nologin spark',
        'chroot "$1" chown spark:spark /opt/spark/work-dir',
    ),
    inputs=(Path(__file__).resolve().parent / "spark-entrypoint.sh",),
)

BASES: Mapping[str, BaseSpec] = {
    spec.name: spec for spec in (PYTHON_BASE, PYTHON_BUILD_BASE, MAVEN_BASE, SPARK_BASE)
}


@dataclass(frozen=True)
class BaseBuild:
    """What a bootstrap cost: the packages installed and the bytes downloaded."""

    packages: list[tuple[str, str]]   # (name, version)
    installed_kib: int
    downloaded_bytes: int
    seconds: float
    cpu_seconds: float


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def host_extra_cas() -> list[Path]:
    """CA certificates the host added to Debian's set (`update-ca-certificates` reads them from here)."""
    root = Path("/usr/local/share/ca-certificates")
    return sorted(p for p in root.rglob("*.crt") if p.is_file()) if root.is_dir() else []


def debian_sources(suite: str) -> list[Path]:
    """The host's apt source files for `suite`: the bases use the same mirror the host does.

    `KCT_DEBIAN_SOURCES` (a sources.list or deb822 .sources file) overrides them, e.g. on a host of
    another release.
    """
    override = os.environ.get("KCT_DEBIAN_SOURCES")
    if override:
        return [Path(override)]
    candidates = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    found = []
    for path in candidates:
        if path.suffix not in {".list", ".sources"} or not path.is_file():
            continue
        lines = [line for line in path.read_text().splitlines() if not line.lstrip().startswith("#")]
        if any(suite in line.split() for line in lines):
            found.append(path)
    if not found:
        raise BootstrapError(f"no apt source on this host names the suite {suite!r} (in /etc/apt/sources.list "
                             "or /etc/apt/sources.list.d/); set KCT_DEBIAN_SOURCES to a sources file for it")
    return found


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def bootstrap_rootfs(spec: BaseSpec, tarball: Path, *, log: Path) -> BaseBuild:
    """mmdebstrap `spec` into `tarball` (an uncompressed root filesystem tar); its output goes to `log`."""
    started, cpu = time.monotonic(), _children_cpu()
    with tempfile.TemporaryDirectory(prefix=f"kct-base-{spec.name}-") as tmp:
        manifest, downloads = Path(tmp, "packages.tsv"), Path(tmp, "downloads")
        inputs = Path(tmp, "inputs")
        inputs.mkdir()
        for source in spec.inputs:
            (inputs / source.name).write_bytes(source.read_bytes())
        argv: list[str] = [
            "mmdebstrap", f"--variant={spec.variant}", "--mode=root", "--format=tar",
            f"--include={','.join(spec.packages)}",
            *(f"--dpkgopt={option}" for option in _DPKG_EXCLUDES),
            # Java's post-install scripts register manual pages in a folder the exclusions leave out.
            "--essential-hook=mkdir -p \"$1\"/usr/share/man/man1",
        ]
        if not spec.ships:
            for ca in host_extra_cas():
                argv.append(f"--customize-hook=copy-in {ca} /usr/local/share/ca-certificates")
            argv.append("--customize-hook=chroot \"$1\" update-ca-certificates --fresh >/dev/null")
        argv += [f"--customize-hook={hook}" for hook in spec.customize]
        # What the bootstrap cost, read before mmdebstrap empties apt's cache.
        argv += [
            # Download size: the Size of each installed package's record in apt's lists (still there now).
            "--customize-hook=chroot \"$1\" sh -c 'dpkg-query -W -f \"\\${binary:Package}=\\${Version}\\n\" "
            "| xargs apt-cache show --no-all-versions' | awk '/^Size:/ {s += $2} END {print s}' "
            f"> {downloads}",
            "--customize-hook=chroot \"$1\" dpkg-query -W "
            f"-f '${{Package}}\\t${{Version}}\\t${{Installed-Size}}\\n' > {manifest}",
            spec.suite, str(tarball), *(str(p) for p in debian_sources(spec.suite)),
        ]
        _run(argv, log=log, what=f"base {spec.name}: mmdebstrap", env={**os.environ, "KCT_BASE_INPUTS": str(inputs)})
        rows = [line.split("\t") for line in manifest.read_text().splitlines() if line]
        packages = [(row[0], row[1]) for row in rows]
        installed = sum(int(row[2] or 0) for row in rows)
        downloaded = int(downloads.read_text().strip() or 0)
    return BaseBuild(packages=packages, installed_kib=installed, downloaded_bytes=downloaded,
                     seconds=time.monotonic() - started, cpu_seconds=_children_cpu() - cpu)


def _run(argv: Sequence[str], *, log: Path, what: str, env: Mapping[str, str] | None = None) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as out:
        out.write(f"$ {' '.join(argv)}\n")
        out.flush()
        proc = subprocess.run(list(argv), stdout=out, stderr=subprocess.STDOUT, check=False,
                              env=dict(env) if env is not None else None)
    if proc.returncode != 0:
        tail = "\n".join(log.read_text().splitlines()[-30:])
        raise BootstrapError(f"{what} exited {proc.returncode} (full log: {log}):\n{tail}")
