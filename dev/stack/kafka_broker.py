"""The local stack's Kafka: one KRaft node (broker + controller) on loopback, with our telemetry plugin.

Any release of kafka_versions.MATRIX (3.7 .. 4.4) runs through the same code: the stack's broker is
KAFKA_VERSION, tests/e2e/test_plugin_versions_e2e.py starts one of each on ports of its own.

Named `kafka_broker`, not `kafka`: with dev/stack on sys.path a module called `kafka` would shadow the
kafka-python package. Standard library only (it runs before any virtualenv exists).

- `install()` copies the Kafka broker's jars (org.apache.kafka:kafka_2.13 and its runtime dependencies,
  plus the logging binding of its line: reload4j for 3.x, log4j2 for 4.x) from Maven Central with
  `mvn dependency:copy-dependencies` into `~/.cache/kct/kafka/<version>/libs` (`install_libs`), and builds
  the plugin jar (`plugin/`, Maven) unless it is newer than every plugin source.
- `up()` formats the storage once (`kafka.tools.StorageTool format`), starts `kafka.Kafka` with a small
  heap, the libs plus the plugin jar on the classpath and the plugin in `metric.reporters` (the class for
  the release, or the one asked for) pointed at the telemetry endpoint, then waits until the broker
  answers a Metadata request. `start()` is the same without the wait, for callers that expect a broker
  to refuse to start. A registered
  client-telemetry plugin is what makes the broker advertise GetTelemetrySubscriptions (API key 71)
  and PushTelemetry (72); without one, clients never push.
- `secure` (the stacks pass it, other brokers do not): SASL_SSL (SCRAM-SHA-512) and SSL with required client
  certificates beside PLAINTEXT, from kafka_security's CA and certificates; the SCRAM user is added when the
  storage is formatted (`--add-scram`), or once with ConfigCommand to storage formatted before. No authorizer:
  every authenticated user may do anything, as the tests' admin must.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import shutil
import socket
import struct
import subprocess
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import _proc
import kafka_security
from kafka_versions import KafkaRelease

__all__ = [
    "BOOTSTRAP",
    "KAFKA_VERSION",
    "PLUGIN_CLASS",
    "PluginTls",
    "SecureListeners",
    "answers",
    "api_versions",
    "configuration",
    "down",
    "ensure_scram_user",
    "install",
    "install_libs",
    "libs_dir",
    "metadata_broker_count",
    "new_cluster_id",
    "plugin_counters",
    "plugin_jar",
    "request",
    "start",
    "status",
    "up",
]

# The stack's broker (kafka_versions.MATRIX holds every release the plugin is tested on). 4.2+ has
# ClientTelemetryExporterProvider (KIP-1217).
KAFKA_VERSION = "4.3.1"
HOST = "127.0.0.1"
PORT = 19092
CONTROLLER_PORT = 19093
BOOTSTRAP = f"{HOST}:{PORT}"
SASL_SSL_PORT = 19095
SSL_PORT = 19096
NAME = "kafka"
HEAP = ["-Xms128m", "-Xmx512m"]
# The stack's class (4.2+); kafka_versions.KafkaRelease.plugin_class gives the one for any release.
PLUGIN_CLASS = KafkaRelease(KAFKA_VERSION).plugin_class

_HERE = Path(__file__).resolve().parent
_REPO = _HERE.parents[1]
_PLUGIN_DIR = _REPO / "plugin"
_DEPS_POM = _HERE / "kafka-deps" / "pom.xml"
_DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
API_GET_TELEMETRY_SUBSCRIPTIONS = 71
API_PUSH_TELEMETRY = 72

_LOG4J2 = """\
# Written by dev/stack/kafka_broker.py: everything to stdout, which the stack sends to logs/kafka.log.
status = warn
# log4j2's own shutdown hook would stop logging while the broker still shuts down (the plugin logs its
# counts when the broker closes it, late in the shutdown): the JVM's exit ends logging instead.
shutdownHook = disable
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.statechange.name = state.change.logger
logger.statechange.level = WARN
logger.kct.name = dev.kct
logger.kct.level = INFO
"""

# Kafka 3.x: the same, in reload4j's (log4j 1.2) properties.
_LOG4J1 = """\
# Written by dev/stack/kafka_broker.py: everything to stdout, which the stack sends to logs/<name>.log.
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka=INFO
log4j.logger.kafka.request.logger=WARN
log4j.logger.state.change.logger=WARN
log4j.logger.dev.kct=INFO
"""


def libs_dir(version: str = KAFKA_VERSION) -> Path:
    return _proc.cache_dir("kafka", version) / "libs"


def _libs_ready(version: str = KAFKA_VERSION) -> bool:
    return (libs_dir(version) / ".complete").exists()


def _built_jar() -> Path:
    """The jar `mvn package` builds in plugin/target (version from plugin/pom.xml)."""
    jars = sorted(p for p in (_PLUGIN_DIR / "target").glob("kct-telemetry-plugin-*.jar")
                  if not p.name.endswith(("-sources.jar", "-javadoc.jar")))
    return jars[-1] if jars else _PLUGIN_DIR / "target" / "kct-telemetry-plugin.jar"


def plugin_jar() -> Path:
    """A content-addressed copy of the built jar, the one the broker runs.

    A running JVM must never see its jar rewritten (rebuilding plugin/ while the stack runs would break
    class loading), and naming the copy by its hash puts it into the broker's command line, so `up()`
    notices a changed plugin and restarts the broker.
    """
    built = _built_jar()
    digest = hashlib.sha256(built.read_bytes()).hexdigest()[:12]
    installed = _proc.cache_dir("kafka", "plugin") / f"{built.stem}-{digest}.jar"
    if not installed.exists():
        tmp = installed.with_suffix(".part")
        shutil.copyfile(built, tmp)
        tmp.replace(installed)
    return installed


def _plugin_sources_mtime() -> float:
    newest = (_PLUGIN_DIR / "pom.xml").stat().st_mtime
    for path in (_PLUGIN_DIR / "src" / "main").rglob("*"):
        if path.is_file():
            newest = max(newest, path.stat().st_mtime)
    return newest


def _plugin_fresh() -> bool:
    jar = _built_jar()
    return jar.exists() and jar.stat().st_mtime >= _plugin_sources_mtime()


def _require(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise _proc.InstallError("kafka", KAFKA_VERSION, f"`{tool}` is not on PATH (Debian: apt-get install "
                                 f"{'maven' if tool == 'mvn' else 'openjdk-17-jdk-headless'})")
    return path


def _mvn(args: list[str], *, tool: str, version: str = KAFKA_VERSION, cwd: Path | None = None) -> None:
    """Run Maven offline first (a warm ~/.m2 needs no network), then online if something is missing."""
    mvn = _require("mvn")
    try:
        _proc.run([mvn, "-B", "-q", "-o", *args], tool=tool, version=version, cwd=cwd)
    except _proc.InstallError:
        _proc.run([mvn, "-B", "-q", *args], tool=tool, version=version, cwd=cwd)


def install_libs(version: str = KAFKA_VERSION) -> None:
    """The jars of a Kafka `version` broker, with its line's logging binding, into the cache (once)."""
    if _libs_ready(version):
        return
    release = KafkaRelease(version)
    with _proc.step(f"Kafka {version} jars (Maven Central -> {libs_dir(version)})"):
        libs = libs_dir(version)
        tmp = libs.with_name("libs.part")
        shutil.rmtree(tmp, ignore_errors=True)
        _mvn(["-f", str(_DEPS_POM), f"-Dkafka.version={version}", f"-Dkafka.logging={release.logging}",
              f"{_DEPENDENCY_PLUGIN}:copy-dependencies", "-DincludeScope=runtime",
              f"-DoutputDirectory={tmp}"], tool="kafka", version=version)
        if not any(tmp.glob(f"kafka_2.13-{version}.jar")):
            raise _proc.InstallError("kafka", version, f"kafka_2.13-{version}.jar was not copied")
        shutil.rmtree(libs, ignore_errors=True)
        tmp.rename(libs)
        (libs / ".complete").write_text(version + "\n")


def install(version: str = KAFKA_VERSION) -> None:
    """Kafka jars into the cache, plugin jar into plugin/target; each skipped when already there."""
    _require("java")
    install_libs(version)
    if not _plugin_fresh():
        with _proc.step("kct broker plugin (mvn package in plugin/)"):
            _mvn(["-DskipTests", "package"], tool="kct-telemetry-plugin", cwd=_PLUGIN_DIR)
            if not _built_jar().exists():
                raise _proc.InstallError("kct-telemetry-plugin", KAFKA_VERSION, "mvn package produced no jar")


# --- a minimal Kafka wire-protocol client: enough to see that the broker is up and what it advertises ---

def request(host: str, port: int, api_key: int, version: int, body: bytes, timeout: float = 3.0) -> bytes:
    """One request (non-flexible header v1) on a connection of its own; the response body after its header."""
    client_id = b"kct-stack"
    header = struct.pack(">hhih", api_key, version, 1, len(client_id)) + client_id
    frame = header + body
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", _recv(sock, 4))[0]
        payload = _recv(sock, size)
    return payload[4:]  # response header v0: correlation id


def _recv(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        data += chunk
    return bytes(data)


def api_versions(host: str = HOST, port: int = PORT) -> dict[int, tuple[int, int]]:
    """ApiVersions v0: {api_key: (min_version, max_version)} the broker advertises."""
    body = request(host, port, 18, 0, b"")
    error, count = struct.unpack_from(">hi", body, 0)
    if error != 0:
        raise ConnectionError(f"ApiVersions error code {error}")
    out: dict[int, tuple[int, int]] = {}
    for i in range(count):
        key, lo, hi = struct.unpack_from(">hhh", body, 6 + 6 * i)
        out[key] = (lo, hi)
    return out


def metadata_broker_count(host: str = HOST, port: int = PORT) -> int:
    """Brokers listed in a Metadata response (v4: the oldest version Kafka 4 still serves, non-flexible)."""
    lo, hi = api_versions(host, port).get(3, (0, -1))
    if not lo <= 4 <= hi:
        raise ConnectionError(f"broker does not serve Metadata v4 (serves v{lo}..v{hi})")
    body = request(host, port, 3, 4, struct.pack(">ib", 0, 0))  # no topics, no auto-creation
    _throttle, brokers = struct.unpack_from(">ii", body, 0)
    return int(brokers)


def answers(host: str, port: int) -> bool:
    """Whether a broker answers a Metadata request on host:port, listing itself."""
    try:
        return metadata_broker_count(host, port) >= 1
    except (OSError, struct.error):
        return False


# --- life cycle ---

@dataclass(frozen=True)
class PluginTls:
    """The plugin's TLS files toward its receiver, each optional: a PEM CA bundle to trust and, for mTLS, a PEM
    client certificate and its key. They become `kct.telemetry.tls.*` properties; the plugin reads them again
    when they change and tolerates a CA file that does not exist yet (plugin/README.md, TLS and mTLS)."""

    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None

    def __post_init__(self) -> None:
        # the plugin refuses one without the other at broker start: say so before a broker is started
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError(f"PluginTls: cert_file ({self.cert_file}) and key_file ({self.key_file}) go together")

    def properties(self) -> list[str]:
        """server.properties lines, in a fixed order (the file's text decides whether a broker restarts)."""
        named = (("kct.telemetry.tls.ca.file", self.ca_file), ("kct.telemetry.tls.cert.file", self.cert_file),
                 ("kct.telemetry.tls.key.file", self.key_file))
        return [f"{key}={path}" for key, path in named if path is not None]


@dataclass(frozen=True)
class SecureListeners:
    """SASL_SSL and mTLS listeners of a stack's broker, on HOST, and SASL_SSL for a node stack's pods."""

    security: kafka_security.KafkaSecurity
    sasl_ssl_port: int = SASL_SSL_PORT
    ssl_port: int = SSL_PORT
    pod_sasl_ssl_listener: str | None = None
    """`host:port` of a SASL_SSL listener for the pods of a node stack."""

    def env(self) -> dict[str, str]:
        """What build/stack.env says about them (the password by file, never inline)."""
        security = self.security
        return {
            "KAFKA_SASL_SSL_BOOTSTRAP_SERVERS": f"{HOST}:{self.sasl_ssl_port}",
            "KAFKA_SSL_BOOTSTRAP_SERVERS": f"{HOST}:{self.ssl_port}",
            "KCT_KAFKA_CA_FILE": str(security.ca_file.resolve()),
            "KCT_KAFKA_SASL_MECHANISM": kafka_security.SCRAM_MECHANISM,
            "KCT_KAFKA_SASL_USERNAME": kafka_security.SCRAM_USER,
            "KCT_KAFKA_SASL_PASSWORD_FILE": str(security.password_file.resolve()),
            "KCT_KAFKA_SASL_PROPERTIES_FILE": str(security.sasl_properties_file.resolve()),
            "KCT_KAFKA_CLIENT_CERT_FILE": str(security.client_cert.resolve()),
            "KCT_KAFKA_CLIENT_KEY_FILE": str(security.client_key.resolve()),
        }


def _secure_properties(secure: SecureListeners) -> tuple[str, str, list[str]]:
    """(listeners, protocol map entries, other lines) the secure listeners add; each is advertised as it
    listens."""
    listeners = f",SASL_SSL://{HOST}:{secure.sasl_ssl_port},SSL://{HOST}:{secure.ssl_port}"
    protocols = ",SASL_SSL:SASL_SSL,SSL:SSL"
    sasl_listeners = ["sasl_ssl"]
    if secure.pod_sasl_ssl_listener:
        listeners += f",PODS_SASL://{secure.pod_sasl_ssl_listener}"
        protocols += ",PODS_SASL:SASL_SSL"
        sasl_listeners.append("pods_sasl")
    mechanism = kafka_security.SCRAM_MECHANISM
    lines = [
        "# SASL_SSL (SCRAM) and SSL with required client certificates: the stack's CA (dev/stack/kafka_security.py).",
        f"sasl.enabled.mechanisms={mechanism}",
        *(f"listener.name.{name}.{mechanism.lower()}.sasl.jaas.config="
          "org.apache.kafka.common.security.scram.ScramLoginModule required;" for name in sasl_listeners),
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={secure.security.broker_pem.resolve()}",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={secure.security.ca_file.resolve()}",
        "listener.name.ssl.ssl.client.auth=required",
    ]
    return listeners, protocols, lines


def _server_properties(data: Path, telemetry_endpoint: str, port: int, controller_port: int,
                       plugin: bool, token_file: Path | None, pod_listener: str | None = None, *,
                       version: str = KAFKA_VERSION, plugin_class: str | None = None, node_id: int = 1,
                       voters: str | None = None, replication: int = 1,
                       secure: SecureListeners | None = None, plugin_tls: PluginTls | None = None) -> str:
    """One combined broker+controller node. Alone by default; `voters` (`id@host:port,...`, see
    kafka_cluster.quorum_voters) makes it node `node_id` of a static quorum, and `replication` the
    replication factor of Kafka's internal topics (min.insync.replicas one less, at least 1).
    `plugin_tls`: the plugin's CA and client certificate files toward an https receiver."""
    # A node stack's pods reach the broker on the node's address: a listener of its own, advertised as such,
    # so clients that bootstrap there are sent back there (and loopback clients to loopback).
    pods = f",PODS://{pod_listener}" if pod_listener else ""
    secured, protocols, secure_lines = _secure_properties(secure) if secure else ("", "", [])
    min_isr = max(1, replication - 1)
    what = "single-node KRaft" if voters is None else f"node {node_id} of a KRaft cluster"
    lines = [
        f"# Written by dev/stack/kafka_broker.py on every `up`: {what} for development and tests.",
        f"# classpath: {_classpath(plugin, version)}  (a different plugin jar means a restart)",
        "process.roles=broker,controller",
        f"node.id={node_id}",
        f"controller.quorum.voters={voters or f'{node_id}@{HOST}:{controller_port}'}",
        f"listeners=PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{controller_port}{pods}{secured}",
        f"advertised.listeners=PLAINTEXT://{HOST}:{port}{pods}{secured}",
        "controller.listener.names=CONTROLLER",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
        f"{',PODS:PLAINTEXT' if pods else ''}{protocols}",
        "inter.broker.listener.name=PLAINTEXT",
        f"log.dirs={data}",
        "num.partitions=1",
        "auto.create.topics.enable=true",
        "group.initial.rebalance.delay.ms=0",
        f"offsets.topic.replication.factor={replication}",
        "offsets.topic.num.partitions=1",
        f"transaction.state.log.replication.factor={replication}",
        f"transaction.state.log.min.isr={min_isr}",
        "transaction.state.log.num.partitions=1",
        f"share.coordinator.state.topic.replication.factor={replication}",
        f"share.coordinator.state.topic.min.isr={min_isr}",
        "share.coordinator.state.topic.num.partitions=1",
        *secure_lines,
    ]
    if replication > 1:
        # A cluster's own topics as production runs them: a write acknowledged by `acks=all` is on two
        # replicas at least, so one broker stopping (a rolling restart) loses none of it.
        lines += [f"default.replication.factor={replication}", f"min.insync.replicas={min_isr}"]
    if plugin:
        lines += [
            "# KIP-714: a registered client-telemetry plugin makes the broker advertise APIs 71/72.",
            f"metric.reporters={plugin_class or KafkaRelease(version).plugin_class}",
            f"kct.telemetry.endpoint={telemetry_endpoint}",
            "kct.telemetry.connect.timeout.ms=1000",
            "kct.telemetry.request.timeout.ms=5000",
        ]
        if token_file is not None:
            lines.append(f"kct.telemetry.token.file={token_file}")
        if plugin_tls is not None:
            lines += plugin_tls.properties()
    return "\n".join(lines) + "\n"


def configuration(state: Path, telemetry_endpoint: str, *, token_file: Path | None = None, plugin: bool = True,
                  name: str = NAME, port: int = PORT, controller_port: int = CONTROLLER_PORT,
                  pod_listener: str | None = None, version: str = KAFKA_VERSION, plugin_class: str | None = None,
                  node_id: int = 1, voters: str | None = None, replication: int = 1,
                  secure: SecureListeners | None = None, plugin_tls: PluginTls | None = None) -> str:
    """The server.properties `start` writes into `<state>/<name>/` for these arguments: a running broker whose
    file says otherwise is restarted by `up` (and by kafka_cluster.up)."""
    return _server_properties(state / name / "data", telemetry_endpoint, port, controller_port, plugin, token_file,
                              pod_listener, version=version, plugin_class=plugin_class, node_id=node_id,
                              voters=voters, replication=replication, secure=secure, plugin_tls=plugin_tls)


def _classpath(plugin: bool, version: str = KAFKA_VERSION) -> str:
    entries = [str(libs_dir(version) / "*")]
    if plugin:
        entries.append(str(plugin_jar()))
    return ":".join(entries)


def _logging_option(kdir: Path, version: str) -> str:
    """Write the logging configuration of the release's line into `kdir`; the JVM option naming it."""
    if KafkaRelease(version).logging == "reload4j":
        (kdir / "log4j.properties").write_text(_LOG4J1)
        return f"-Dlog4j.configuration=file:{kdir / 'log4j.properties'}"
    (kdir / "log4j2.properties").write_text(_LOG4J2)
    return f"-Dlog4j2.configurationFile={kdir / 'log4j2.properties'}"


def _java(kdir: Path, plugin: bool, version: str = KAFKA_VERSION, heap: Sequence[str] = HEAP) -> list[str]:
    return [_require("java"), *heap, "-XX:+UseG1GC", "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true",
            _logging_option(kdir, version), f"-Dkafka.logs.dir={kdir / 'logs'}",
            "-cp", _classpath(plugin, version)]


def new_cluster_id() -> str:
    while True:  # Kafka's Uuid: 16 random bytes, base64url without padding; never starting with '-'
        value = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not value.startswith("-"):
            return value


def up(state: Path, telemetry_endpoint: str, *, token_file: Path | None = None, plugin: bool = True,
       name: str = NAME, port: int = PORT, controller_port: int = CONTROLLER_PORT,
       pod_listener: str | None = None, version: str = KAFKA_VERSION, plugin_class: str | None = None,
       jvm: Sequence[str] = HEAP, secure: SecureListeners | None = None,
       plugin_tls: PluginTls | None = None) -> dict[str, str]:
    """Start the broker (idempotent: a running broker with the same configuration is left alone).

    A running broker whose configuration differs (e.g. another KCT_TELEMETRY_ENDPOINT) is restarted.
    `token_file`: a file whose content the plugin sends as `Authorization: Bearer ...`.
    `plugin_tls`: the plugin's CA bundle (an https endpoint) and, for mTLS, its client certificate (PluginTls).
    `plugin`, `name` and the ports exist for benchmarks that need a second broker without the plugin.
    `pod_listener`: `host:port` of one more listener, for the pods of a node stack (stack.py node-up).
    `version`: any Kafka release (kafka_versions.MATRIX); `plugin_class`: by default the release's own.
    `jvm`: heap and other JVM options. `secure`: SASL_SSL and mTLS listeners too (their variables are returned).
    """
    if not _libs_ready(version) or (plugin and not _plugin_fresh()):
        install(version)
    config = state / name / "server.properties"
    wanted = configuration(state, telemetry_endpoint, token_file=token_file, plugin=plugin, name=name, port=port,
                           controller_port=controller_port, pod_listener=pod_listener, version=version,
                           plugin_class=plugin_class, secure=secure, plugin_tls=plugin_tls)
    log = state / "logs" / f"{name}.log"
    env = {"KAFKA_BOOTSTRAP_SERVERS": f"{HOST}:{port}", **(secure.env() if secure else {})}
    if _proc.is_running(state, name):
        if config.exists() and config.read_text() == wanted:
            # same configuration: maybe still starting (another `up`), so wait rather than restart
            _proc.wait_until(lambda: answers(HOST, port), timeout=120, what=f"Kafka broker {HOST}:{port}",
                             log=log, alive=lambda: _proc.is_running(state, name))
            ensure_scram_user(state, name, port, secure, version)
            return env
        with _proc.step(f"restart Kafka {version} ({name}: configuration or plugin jar changed)"):
            _proc.stop_daemon(state, name, timeout=30)
    with _proc.step(f"start Kafka {version} ({name}) on {HOST}:{port}"):
        start(state, telemetry_endpoint, token_file=token_file, plugin=plugin, name=name, port=port,
              controller_port=controller_port, pod_listener=pod_listener, version=version,
              plugin_class=plugin_class, jvm=jvm, secure=secure, plugin_tls=plugin_tls)
        _proc.wait_until(lambda: answers(HOST, port), timeout=120, what=f"Kafka broker {HOST}:{port}",
                         log=log, alive=lambda: _proc.is_running(state, name))
        ensure_scram_user(state, name, port, secure, version)
    return env


def _scram_marker(state: Path, name: str) -> Path:
    """The SCRAM password the broker's metadata has (written once it does)."""
    return state / name / "scram-credential"


def ensure_scram_user(state: Path, name: str, port: int, secure: SecureListeners | None,
                      version: str = KAFKA_VERSION) -> None:
    """Storage formatted before the secure listeners existed (or another password) has no SCRAM credential:
    add it once through the PLAINTEXT listener (a JVM start; `start` formats new storage with it)."""
    if secure is None:
        return
    marker = _scram_marker(state, name)
    password = secure.security.password
    if marker.exists() and marker.read_text() == password:
        return
    with _proc.step(f"SCRAM credential of {kafka_security.SCRAM_USER} ({name})"):
        _proc.run([*_java(state / name, False, version), "kafka.admin.ConfigCommand", "--bootstrap-server",
                   f"{HOST}:{port}", "--alter", "--entity-type", "users", "--entity-name", kafka_security.SCRAM_USER,
                   "--add-config", f"{kafka_security.SCRAM_MECHANISM}=[password={password}]"],
                  tool="kafka", version=version)
    marker.write_text(password)
    marker.chmod(0o600)


def start(state: Path, telemetry_endpoint: str, *, token_file: Path | None = None, plugin: bool = True,
          name: str = NAME, port: int = PORT, controller_port: int = CONTROLLER_PORT,
          pod_listener: str | None = None, version: str = KAFKA_VERSION, plugin_class: str | None = None,
          jvm: Sequence[str] = HEAP, node_id: int = 1, voters: str | None = None, cluster_id: str | None = None,
          replication: int = 1, secure: SecureListeners | None = None, plugin_tls: PluginTls | None = None) -> Path:
    """Write the configuration, format the storage when new and start the broker, without waiting for it
    (`up` waits; a test of a broker that must refuse to start watches the process and its log itself).
    The jars must be installed. Returns the broker's log, `<state>/logs/<name>.log`.
    `node_id`, `voters`, `cluster_id` (shared by every node) and `replication`: a node of a cluster
    (kafka_cluster.py); by default a cluster of its own."""
    ports = [port] if secure is None else [port, secure.sasl_ssl_port, secure.ssl_port]
    for taken in (p for p in ports if _proc.port_open(HOST, p)):
        raise _proc.InstallError("kafka", version, f"port {HOST}:{taken} is taken by a process this stack "
                                 "did not start (stop it, or `make stack-down`)")
    kdir = state / name
    data = kdir / "data"
    config = kdir / "server.properties"
    kdir.mkdir(parents=True, exist_ok=True)
    config.write_text(configuration(state, telemetry_endpoint, token_file=token_file, plugin=plugin, name=name,
                                    port=port, controller_port=controller_port, pod_listener=pod_listener,
                                    version=version, plugin_class=plugin_class, node_id=node_id, voters=voters,
                                    replication=replication, secure=secure, plugin_tls=plugin_tls))
    java = _java(kdir, plugin, version, jvm)
    if not (data / "meta.properties").exists():
        with _proc.step(f"format KRaft storage ({data})"):
            shutil.rmtree(data, ignore_errors=True)
            _scram_marker(state, name).unlink(missing_ok=True)
            scram = [] if secure is None else [
                "--add-scram", f"{kafka_security.SCRAM_MECHANISM}=[name={kafka_security.SCRAM_USER},"
                f"password={secure.security.password}]"]
            _proc.run([*java, "kafka.tools.StorageTool", "format", "-t", cluster_id or new_cluster_id(), "-c",
                       str(config), *scram], tool="kafka", version=version)
            if secure is not None:
                _scram_marker(state, name).write_text(secure.security.password)
    _proc.start_daemon(state, name, [*java, "kafka.Kafka", str(config)])
    return state / "logs" / f"{name}.log"


def down(state: Path, *, name: str = NAME) -> None:
    """Stop the broker this stack started (its data stays, so the next `up` is quick)."""
    _proc.stop_daemon(state, name, timeout=30)


def status(state: Path, *, name: str = NAME, port: int = PORT) -> list[str]:
    if not _proc.is_running(state, name):
        return [f"{name} {KAFKA_VERSION}: stopped"]
    pid = _proc.read_pid(state, name)
    try:
        apis = api_versions(HOST, port)
    except (OSError, struct.error):
        return [f"{name} {KAFKA_VERSION}: starting (pid {pid}), not answering on {HOST}:{port} yet"]
    telemetry = all(k in apis for k in (API_GET_TELEMETRY_SUBSCRIPTIONS, API_PUSH_TELEMETRY))
    config = state / name / "server.properties"
    endpoint = ""
    if config.exists():
        for line in config.read_text().splitlines():
            if line.startswith("kct.telemetry.endpoint="):
                endpoint = line.partition("=")[2]
    plugin = f"plugin -> {endpoint}" if endpoint else "no telemetry plugin"
    return [f"{name} {KAFKA_VERSION}: running (pid {pid}) on {HOST}:{port}, {plugin}, "
            f"telemetry APIs 71/72 {'advertised' if telemetry else 'NOT advertised'}"]



# Reads the plugin's own metrics from the running broker over JMX (attach API, JDK single-file launcher).
_JMX_DUMP = """
import com.sun.tools.attach.VirtualMachine;
import javax.management.MBeanAttributeInfo;
import javax.management.MBeanServerConnection;
import javax.management.ObjectName;
import javax.management.remote.JMXConnector;
import javax.management.remote.JMXConnectorFactory;
import javax.management.remote.JMXServiceURL;

public class JmxDump {
    public static void main(String[] args) throws Exception {
        VirtualMachine vm = VirtualMachine.attach(args[0]);
        String url = vm.startLocalManagementAgent();
        vm.detach();
        try (JMXConnector c = JMXConnectorFactory.connect(new JMXServiceURL(url))) {
            MBeanServerConnection s = c.getMBeanServerConnection();
            for (ObjectName n : s.queryNames(new ObjectName(args[1]), null)) {
                for (MBeanAttributeInfo i : s.getMBeanInfo(n).getAttributes()) {
                    System.out.println(i.getName() + "=" + s.getAttribute(n, i.getName()));
                }
            }
        }
    }
}
"""


def plugin_counters(state: Path, *, name: str = NAME) -> dict[str, float]:
    """The plugin's own metrics (forwarded-total, dropped-*-total, queue-depth...) read from the running
    broker over JMX; {} when the broker is not running or cannot be attached to."""
    pid = _proc.read_pid(state, name)
    if pid is None:
        return {}
    source = state / name / "JmxDump.java"
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_text(_JMX_DUMP)
    try:
        out = subprocess.run([_require("java"), str(source), str(pid),
                              "kct.telemetry:type=client-telemetry-forwarder,*"],
                             capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError, _proc.InstallError):
        return {}
    values: dict[str, float] = {}
    for line in out.splitlines():
        key, _, value = line.partition("=")
        with contextlib.suppress(ValueError):
            values[key] = float(value)
    return values
