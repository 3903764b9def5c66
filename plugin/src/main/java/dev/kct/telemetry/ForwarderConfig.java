package dev.kct.telemetry;

import java.net.URI;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;

import javax.net.ssl.SSLContext;

import org.apache.kafka.common.config.ConfigException;

/**
 * The plugin's configuration: every property lives under {@link #PREFIX} in the broker's
 * configuration (server.properties or dynamic broker configs), so it never collides with Kafka's own.
 *
 * <p>Parsed once into an immutable value; a bad value fails broker start-up with a {@link ConfigException}
 * naming the property, the value and the rule, rather than silently forwarding nowhere.
 */
public final class ForwarderConfig {

    public static final String PREFIX = "kct.telemetry.";

    public static final String ENDPOINT = PREFIX + "endpoint";
    public static final String TOKEN_FILE = PREFIX + "token.file";
    public static final String CONNECT_TIMEOUT_MS = PREFIX + "connect.timeout.ms";
    public static final String REQUEST_TIMEOUT_MS = PREFIX + "request.timeout.ms";
    public static final String QUEUE_CAPACITY = PREFIX + "queue.capacity";
    public static final String QUEUE_MAX_BYTES = PREFIX + "queue.max.bytes";
    public static final String QUEUE_MAX_AGE_MS = PREFIX + "queue.max.age.ms";
    public static final String SENDER_THREADS = PREFIX + "sender.threads";
    public static final String RETRIES_MAX = PREFIX + "retries.max";
    public static final String RETRY_BACKOFF_MS = PREFIX + "retry.backoff.ms";
    public static final String RETRY_BACKOFF_MAX_MS = PREFIX + "retry.backoff.max.ms";
    public static final String CLOSE_TIMEOUT_MS = PREFIX + "close.timeout.ms";
    public static final String TLS_CA_FILE = PREFIX + "tls.ca.file";
    public static final String TLS_TRUSTSTORE_PATH = PREFIX + "tls.truststore.path";
    public static final String TLS_TRUSTSTORE_PASSWORD = PREFIX + "tls.truststore.password";
    public static final String TLS_TRUSTSTORE_TYPE = PREFIX + "tls.truststore.type";
    public static final String TLS_INSECURE_SKIP_VERIFY = PREFIX + "tls.insecure.skip.verify";
    public static final String TLS_CERT_FILE = PREFIX + "tls.cert.file";
    public static final String TLS_KEY_FILE = PREFIX + "tls.key.file";
    public static final String TLS_KEYSTORE_PATH = PREFIX + "tls.keystore.path";
    public static final String TLS_KEYSTORE_PASSWORD = PREFIX + "tls.keystore.password";
    public static final String TLS_KEYSTORE_TYPE = PREFIX + "tls.keystore.type";
    public static final String TLS_MIN_VERSION = PREFIX + "tls.min.version";
    public static final String TLS_CIPHER_SUITES = PREFIX + "tls.cipher.suites";
    public static final String TLS_RELOAD_CHECK_MS = PREFIX + "tls.reload.check.ms";
    public static final String JMX_PREFIX = PREFIX + "jmx.prefix";

    /** Properties the broker may change at run time (kafka-configs --alter --entity-type brokers). */
    public static final Set<String> RECONFIGURABLE = Set.of(ENDPOINT, TOKEN_FILE);

    public static final String DEFAULT_ENDPOINT = "http://127.0.0.1:4318/v1/metrics";

    public final URI endpoint;
    public final Path tokenFile;
    public final Duration connectTimeout;
    public final Duration requestTimeout;
    public final int queueCapacity;
    public final long queueMaxBytes;
    public final long queueMaxAgeMs;
    public final int senderThreads;
    public final int retriesMax;
    public final long retryBackoffMs;
    public final long retryBackoffMaxMs;
    public final long closeTimeoutMs;
    public final Path tlsCaFile;
    public final Path tlsTruststorePath;
    public final String tlsTruststorePassword;
    public final String tlsTruststoreType;
    public final boolean tlsInsecureSkipVerify;
    /** PEM client certificate chain and private key for mTLS (both or neither). */
    public final Path tlsCertFile;
    public final Path tlsKeyFile;
    /** Or a keystore holding the client key and chain (its password also unlocks the key). */
    public final Path tlsKeystorePath;
    public final String tlsKeystorePassword;
    public final String tlsKeystoreType;
    /** Protocols offered: the minimum and every newer one the JVM knows. */
    public final List<String> tlsProtocols;
    /** Cipher suites offered, or empty for the JVM's defaults. */
    public final List<String> tlsCipherSuites;
    public final long tlsReloadCheckMs;
    public final String jmxPrefix;

    private ForwarderConfig(Map<String, ?> configs) {
        endpoint = parseEndpoint(string(configs, ENDPOINT, DEFAULT_ENDPOINT));
        tokenFile = path(configs, TOKEN_FILE);
        connectTimeout = Duration.ofMillis(longValue(configs, CONNECT_TIMEOUT_MS, 2_000, 1, 600_000));
        requestTimeout = Duration.ofMillis(longValue(configs, REQUEST_TIMEOUT_MS, 10_000, 1, 600_000));
        queueCapacity = (int) longValue(configs, QUEUE_CAPACITY, 1_000, 1, 1_000_000);
        queueMaxBytes = longValue(configs, QUEUE_MAX_BYTES, 64L * 1024 * 1024, 1, Long.MAX_VALUE);
        queueMaxAgeMs = longValue(configs, QUEUE_MAX_AGE_MS, 60_000, 1, 86_400_000);
        senderThreads = (int) longValue(configs, SENDER_THREADS, 4, 1, 64);
        retriesMax = (int) longValue(configs, RETRIES_MAX, 3, 0, 100);
        retryBackoffMs = longValue(configs, RETRY_BACKOFF_MS, 100, 1, 600_000);
        retryBackoffMaxMs = longValue(configs, RETRY_BACKOFF_MAX_MS, 1_000, 1, 3_600_000);
        closeTimeoutMs = longValue(configs, CLOSE_TIMEOUT_MS, 5_000, 0, 600_000);
        tlsCaFile = path(configs, TLS_CA_FILE);
        tlsTruststorePath = path(configs, TLS_TRUSTSTORE_PATH);
        tlsTruststorePassword = string(configs, TLS_TRUSTSTORE_PASSWORD, "");
        tlsTruststoreType = string(configs, TLS_TRUSTSTORE_TYPE, "PKCS12");
        tlsInsecureSkipVerify = bool(configs, TLS_INSECURE_SKIP_VERIFY, false);
        tlsCertFile = path(configs, TLS_CERT_FILE);
        tlsKeyFile = path(configs, TLS_KEY_FILE);
        tlsKeystorePath = path(configs, TLS_KEYSTORE_PATH);
        tlsKeystorePassword = string(configs, TLS_KEYSTORE_PASSWORD, "");
        tlsKeystoreType = string(configs, TLS_KEYSTORE_TYPE, "PKCS12");
        tlsProtocols = protocolsFrom(string(configs, TLS_MIN_VERSION, DEFAULT_TLS_MIN_VERSION));
        tlsCipherSuites = cipherSuites(string(configs, TLS_CIPHER_SUITES, ""));
        tlsReloadCheckMs = longValue(configs, TLS_RELOAD_CHECK_MS, 10_000, 10, 3_600_000);
        jmxPrefix = string(configs, JMX_PREFIX, "kct.telemetry");
        if (retryBackoffMaxMs < retryBackoffMs) {
            throw new ConfigException(RETRY_BACKOFF_MAX_MS, retryBackoffMaxMs,
                "must be at least " + RETRY_BACKOFF_MS + " (" + retryBackoffMs + ")");
        }
        if (tlsCaFile != null && tlsTruststorePath != null) {
            throw new ConfigException(TLS_CA_FILE, tlsCaFile, "set either " + TLS_CA_FILE + " or "
                + TLS_TRUSTSTORE_PATH + ", not both");
        }
        if ((tlsCertFile == null) != (tlsKeyFile == null)) {
            String set = tlsCertFile != null ? TLS_CERT_FILE : TLS_KEY_FILE;
            String missing = tlsCertFile != null ? TLS_KEY_FILE : TLS_CERT_FILE;
            throw new ConfigException(set, tlsCertFile != null ? tlsCertFile : tlsKeyFile,
                "a client certificate needs its private key: set " + missing + " too");
        }
        if (tlsCertFile != null && tlsKeystorePath != null) {
            throw new ConfigException(TLS_CERT_FILE, tlsCertFile, "set either " + TLS_CERT_FILE + " and "
                + TLS_KEY_FILE + " (PEM) or " + TLS_KEYSTORE_PATH + ", not both");
        }
        if (tlsKeystorePath == null && !tlsKeystorePassword.isEmpty()) {
            throw new ConfigException(TLS_KEYSTORE_PASSWORD, "(hidden)", "has no effect without "
                + TLS_KEYSTORE_PATH);
        }
    }

    /** Whether any TLS file is configured: only then is there anything to load or reload. */
    public boolean hasTlsFiles() {
        return tlsCaFile != null || tlsTruststorePath != null || tlsCertFile != null || tlsKeystorePath != null;
    }

    public static final String DEFAULT_TLS_MIN_VERSION = "TLSv1.2";
    /** Newest first; older versions than TLSv1.2 are broken or deprecated (RFC 8996) and never offered. */
    private static final List<String> TLS_VERSIONS = List.of("TLSv1.3", "TLSv1.2");

    private static List<String> protocolsFrom(String minVersion) {
        int at = TLS_VERSIONS.indexOf(minVersion);
        if (at < 0) {
            throw new ConfigException(TLS_MIN_VERSION, minVersion, "must be one of " + TLS_VERSIONS
                + " (older versions are not offered)");
        }
        return TLS_VERSIONS.subList(0, at + 1);
    }

    private static List<String> cipherSuites(String raw) {
        List<String> wanted = new ArrayList<>();
        for (String part : raw.split(",")) {
            if (!part.isBlank()) {
                wanted.add(part.trim());
            }
        }
        if (wanted.isEmpty()) {
            return List.of();
        }
        List<String> supported;
        try {
            supported = Arrays.asList(SSLContext.getDefault().getSupportedSSLParameters().getCipherSuites());
        } catch (java.security.NoSuchAlgorithmException e) {
            throw new ConfigException(TLS_CIPHER_SUITES, raw, "cannot list this JVM's cipher suites: " + e);
        }
        List<String> unknown = new ArrayList<>(wanted);
        unknown.removeAll(supported);
        if (!unknown.isEmpty()) {
            throw new ConfigException(TLS_CIPHER_SUITES, raw, "not supported by this JVM: " + unknown
                + " (names as in the JSSE standard names, e.g. TLS_AES_128_GCM_SHA256)");
        }
        return List.copyOf(wanted);
    }

    /** Parse the broker's configuration map (unknown keys ignored); throws ConfigException on bad values. */
    public static ForwarderConfig parse(Map<String, ?> configs) {
        return new ForwarderConfig(configs);
    }

    /** Validate and parse an endpoint URL: http or https with a host. */
    public static URI parseEndpoint(String value) {
        URI uri;
        try {
            uri = URI.create(value.trim());
        } catch (IllegalArgumentException e) {
            throw new ConfigException(ENDPOINT, value, "not a URL: " + e.getMessage());
        }
        String scheme = uri.getScheme() == null ? "" : uri.getScheme().toLowerCase(Locale.ROOT);
        if (!scheme.equals("http") && !scheme.equals("https")) {
            throw new ConfigException(ENDPOINT, value, "must be an http:// or https:// URL");
        }
        if (uri.getHost() == null) {
            throw new ConfigException(ENDPOINT, value, "must name a host");
        }
        return uri;
    }

    static String string(Map<String, ?> configs, String key, String defaultValue) {
        Object value = configs.get(key);
        if (value == null) {
            return defaultValue;
        }
        if (value instanceof org.apache.kafka.common.config.types.Password password) {
            return password.value();
        }
        return value.toString().trim();
    }

    private static Path path(Map<String, ?> configs, String key) {
        String value = string(configs, key, "");
        return value.isEmpty() ? null : Path.of(value);
    }

    private static long longValue(Map<String, ?> configs, String key, long defaultValue, long min, long max) {
        String raw = string(configs, key, null);
        if (raw == null || raw.isEmpty()) {
            return defaultValue;
        }
        long value;
        try {
            value = Long.parseLong(raw);
        } catch (NumberFormatException e) {
            throw new ConfigException(key, raw, "not an integer");
        }
        if (value < min || value > max) {
            throw new ConfigException(key, raw, "must be between " + min + " and " + max);
        }
        return value;
    }

    private static boolean bool(Map<String, ?> configs, String key, boolean defaultValue) {
        String raw = string(configs, key, null);
        if (raw == null || raw.isEmpty()) {
            return defaultValue;
        }
        switch (raw.toLowerCase(Locale.ROOT)) {
            case "true":
                return true;
            case "false":
                return false;
            default:
                throw new ConfigException(key, raw, "must be true or false");
        }
    }
}
