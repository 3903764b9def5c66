package dev.kct.telemetry;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyStore;
import java.security.MessageDigest;
import java.security.PrivateKey;
import java.security.cert.X509Certificate;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import javax.net.ssl.KeyManager;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLEngine;
import javax.net.ssl.TrustManager;
import javax.net.ssl.TrustManagerFactory;
import javax.net.ssl.X509ExtendedTrustManager;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The TLS material of the connections to the endpoint (trusted CAs, client certificate and key), loaded
 * from files that are rotated under a running broker: a mounted Kubernetes Secret, cert-manager, or an
 * operator that issues the receivers' CA only after the broker started.
 *
 * <p>So the files are read again every {@code tls.reload.check.ms} and, when their bytes changed, a new
 * {@link SSLContext} is built with a new {@link Material#generation}; the forwarder then builds a new HTTP
 * client for new connections while in-flight requests finish on the old one. A file that does not exist
 * yet is not an error: there is no material until it appears, and sends fail as for an unreachable
 * endpoint (counted, retried, paused). A file that cannot be read as what it should be is logged as an
 * error and the previous material is kept, so a bad rotation never takes working pushes down.
 */
final class TlsContextSource {

    private static final Logger LOG = LoggerFactory.getLogger(TlsContextSource.class);
    /** Password of the in-memory keystore that carries a PEM key to the key manager; never on disk. */
    private static final char[] IN_MEMORY = "kct-telemetry".toCharArray();

    /** One loaded SSL context; a higher generation means newer files. */
    record Material(long generation, SSLContext context) {
    }

    private final ForwarderConfig config;
    private final Runnable onReload;
    private final Runnable onError;
    private final Map<String, Path> files = new LinkedHashMap<>();
    private final long checkEveryNanos;
    private final AtomicLong lastCheckNanos = new AtomicLong();
    private volatile Material material;
    private volatile String problem = "TLS material not loaded yet";
    private byte[] seenDigest;
    private long generation;

    /** Loads the files once now (a missing or bad file is logged, not thrown: see the class comment). */
    TlsContextSource(ForwarderConfig config, Runnable onReload, Runnable onError) {
        this.config = config;
        this.onReload = onReload;
        this.onError = onError;
        this.checkEveryNanos = TimeUnit.MILLISECONDS.toNanos(config.tlsReloadCheckMs);
        track(ForwarderConfig.TLS_CA_FILE, config.tlsCaFile);
        track(ForwarderConfig.TLS_TRUSTSTORE_PATH, config.tlsTruststorePath);
        track(ForwarderConfig.TLS_CERT_FILE, config.tlsCertFile);
        track(ForwarderConfig.TLS_KEY_FILE, config.tlsKeyFile);
        track(ForwarderConfig.TLS_KEYSTORE_PATH, config.tlsKeystorePath);
        if (config.tlsInsecureSkipVerify) {
            LOG.warn("{} is true: the endpoint's certificate is NOT verified", ForwarderConfig.TLS_INSECURE_SKIP_VERIFY);
        }
        lastCheckNanos.set(System.nanoTime());
        refresh(true);
    }

    private void track(String property, Path path) {
        if (path != null) {
            files.put(property, path);
        }
    }

    /**
     * The material for new connections, after reading the files again when a check is due; null while
     * none could be loaded yet ({@link #problem} says why).
     */
    Material current() {
        if (!files.isEmpty()) {
            long now = System.nanoTime();
            long last = lastCheckNanos.get();
            if (now - last >= checkEveryNanos && lastCheckNanos.compareAndSet(last, now)) {
                refresh(false);
            }
        }
        return material;
    }

    /** Why there is no material (meaningful while {@link #current} returns null). */
    String problem() {
        return problem;
    }

    private synchronized void refresh(boolean first) {
        Map<String, byte[]> contents = new LinkedHashMap<>();
        List<String> missing = new ArrayList<>();
        MessageDigest digest = sha256();
        for (Map.Entry<String, Path> file : files.entrySet()) {
            byte[] bytes;
            try {
                bytes = Files.readAllBytes(file.getValue());
            } catch (NoSuchFileException e) {
                missing.add(file.getKey() + "=" + file.getValue());
                bytes = null;
            } catch (IOException e) {
                missing.add(file.getKey() + "=" + file.getValue() + " (unreadable: " + e + ")");
                bytes = null;
            }
            digest.update(file.getKey().getBytes(StandardCharsets.UTF_8));
            digest.update(bytes == null ? new byte[] {0} : sha256().digest(bytes));
            contents.put(file.getKey(), bytes);
        }
        byte[] now = digest.digest();
        if (!first && Arrays.equals(now, seenDigest)) {
            return;
        }
        seenDigest = now;
        if (!missing.isEmpty()) {
            String why = "TLS file(s) " + String.join(", ", missing) + " do not exist";
            if (material == null) {
                problem = why + " (yet)";
                LOG.warn("kct telemetry: {} yet: pushes fail and are retried as for an unreachable endpoint until "
                    + "they appear (checked every {} ms)", why, config.tlsReloadCheckMs);
            } else {
                LOG.warn("kct telemetry: {}: the previous TLS material is kept", why);
            }
            return;
        }
        try {
            SSLContext context = build(contents);
            material = new Material(++generation, context);
            problem = null;
            if (first) {
                if (!files.isEmpty()) {
                    LOG.info("kct telemetry TLS material loaded from {}", files.values());
                }
            } else {
                onReload.run();
                LOG.info("kct telemetry TLS material reloaded from {}: new connections use it", files.values());
            }
        } catch (GeneralSecurityException | IOException | RuntimeException e) {
            onError.run();
            String why = e.getMessage() == null ? e.toString() : e.getMessage();
            if (material == null) {
                problem = "TLS material cannot be loaded: " + why;
                LOG.error("kct telemetry TLS material cannot be loaded: {}; pushes fail until the files are fixed", why);
            } else {
                LOG.error("kct telemetry TLS material cannot be reloaded: {}; the previous material is kept", why);
            }
        }
    }

    private SSLContext build(Map<String, byte[]> contents) throws GeneralSecurityException, IOException {
        if (files.isEmpty() && !config.tlsInsecureSkipVerify) {
            // nothing of ours: the JVM's default context, which honours the broker's javax.net.ssl.* properties
            return SSLContext.getDefault();
        }
        TrustManager[] trust;
        if (config.tlsInsecureSkipVerify) {
            trust = new TrustManager[] {new TrustAll()};
        } else {
            KeyStore trusted = null;  // null: the JVM's default CAs
            if (config.tlsCaFile != null) {
                trusted = KeyStore.getInstance(KeyStore.getDefaultType());
                trusted.load(null, null);
                int i = 0;
                for (X509Certificate cert : PemFiles.certificates(contents.get(ForwarderConfig.TLS_CA_FILE),
                        describe(ForwarderConfig.TLS_CA_FILE))) {
                    trusted.setCertificateEntry("ca-" + i++, cert);
                }
            } else if (config.tlsTruststorePath != null) {
                trusted = keyStore(ForwarderConfig.TLS_TRUSTSTORE_PATH, config.tlsTruststoreType,
                    config.tlsTruststorePassword, contents);
            }
            TrustManagerFactory tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
            tmf.init(trusted);
            trust = tmf.getTrustManagers();
        }
        KeyManager[] keys = null;
        if (config.tlsCertFile != null) {
            String certWhat = describe(ForwarderConfig.TLS_CERT_FILE);
            List<X509Certificate> chain = PemFiles.certificates(contents.get(ForwarderConfig.TLS_CERT_FILE), certWhat);
            PrivateKey key = PemFiles.privateKey(contents.get(ForwarderConfig.TLS_KEY_FILE),
                describe(ForwarderConfig.TLS_KEY_FILE));
            PemFiles.checkPair(key, chain.get(0), describe(ForwarderConfig.TLS_KEY_FILE) + " and " + certWhat);
            KeyStore store = KeyStore.getInstance("PKCS12");
            store.load(null, null);
            store.setKeyEntry("client", key, IN_MEMORY, chain.toArray(new X509Certificate[0]));
            keys = keyManagers(store, IN_MEMORY);
        } else if (config.tlsKeystorePath != null) {
            KeyStore store = keyStore(ForwarderConfig.TLS_KEYSTORE_PATH, config.tlsKeystoreType,
                config.tlsKeystorePassword, contents);
            boolean hasKey = false;
            for (String alias : Collections.list(store.aliases())) {
                hasKey |= store.isKeyEntry(alias);
            }
            if (!hasKey) {
                throw new GeneralSecurityException(describe(ForwarderConfig.TLS_KEYSTORE_PATH)
                    + " holds no private key entry");
            }
            keys = keyManagers(store, config.tlsKeystorePassword.toCharArray());
        }
        SSLContext context = SSLContext.getInstance("TLS");
        context.init(keys, trust, null);
        return context;
    }

    private KeyStore keyStore(String property, String type, String password, Map<String, byte[]> contents)
            throws GeneralSecurityException {
        KeyStore store = KeyStore.getInstance(type);
        try {
            store.load(new ByteArrayInputStream(contents.get(property)), password.toCharArray());
        } catch (IOException e) {
            throw new GeneralSecurityException(describe(property) + " cannot be read as a " + type + " store: "
                + e.getMessage());
        }
        return store;
    }

    private static KeyManager[] keyManagers(KeyStore store, char[] password) throws GeneralSecurityException {
        KeyManagerFactory kmf = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
        kmf.init(store, password);
        return kmf.getKeyManagers();
    }

    private String describe(String property) {
        return property + "=" + files.get(property);
    }

    private static MessageDigest sha256() {
        try {
            return MessageDigest.getInstance("SHA-256");
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("every JVM has SHA-256", e);
        }
    }

    /** Accepts any certificate and host name: only for tls.insecure.skip.verify=true. */
    private static final class TrustAll extends X509ExtendedTrustManager {
        @Override
        public void checkClientTrusted(X509Certificate[] chain, String authType, java.net.Socket socket) {
        }

        @Override
        public void checkServerTrusted(X509Certificate[] chain, String authType, java.net.Socket socket) {
        }

        @Override
        public void checkClientTrusted(X509Certificate[] chain, String authType, SSLEngine engine) {
        }

        @Override
        public void checkServerTrusted(X509Certificate[] chain, String authType, SSLEngine engine) {
        }

        @Override
        public void checkClientTrusted(X509Certificate[] chain, String authType) {
        }

        @Override
        public void checkServerTrusted(X509Certificate[] chain, String authType) {
        }

        @Override
        public X509Certificate[] getAcceptedIssuers() {
            return new X509Certificate[0];
        }
    }
}
