package dev.kct.telemetry;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.URI;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.PrivateKey;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.LockSupport;
import java.util.stream.Collectors;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The plugin against an HTTPS endpoint that requires a client certificate: PEM and keystore client
 * certificates, rotation of the client certificate and of the CA file under load with every queued push
 * delivered, a CA file that appears only after start, and a malformed file that keeps the working material.
 */
class MutualTlsTest {

    @TempDir
    static Path certs;
    static TestCertificates.Ca caA;
    static TestCertificates.Ca caB;
    static TestCertificates.Issued serverA;
    static TestCertificates.Issued serverB;
    static TestCertificates.Issued client1;
    static TestCertificates.Issued client2;

    @BeforeAll
    static void issueCertificates() throws Exception {
        TestCertificates issuer = new TestCertificates(certs);
        caA = issuer.ca("kct-test-ca-a");
        caB = issuer.ca("kct-test-ca-b");
        serverA = issuer.issue(caA, "server-a", "EC");
        serverB = issuer.issue(caB, "server-b", "EC");
        client1 = issuer.issue(caA, "client-1", "RSA");
        client2 = issuer.issue(caA, "client-2", "EC");
    }

    private static Forwarder forwarder(String endpoint, Map<String, String> tls) {
        Map<String, Object> configs = new HashMap<>();
        configs.put(ForwarderConfig.ENDPOINT, endpoint);
        configs.put(ForwarderConfig.RETRY_BACKOFF_MS, "10");
        configs.put(ForwarderConfig.RETRY_BACKOFF_MAX_MS, "50");
        configs.put(ForwarderConfig.CLOSE_TIMEOUT_MS, "200");
        configs.put(ForwarderConfig.TLS_RELOAD_CHECK_MS, "50");
        configs.put(ForwarderConfig.JMX_PREFIX, "kct.telemetry.tls-test");
        configs.putAll(tls);
        return new Forwarder(ForwarderConfig.parse(configs), Map.of());
    }

    private static ByteBuffer payload(String text) {
        return ByteBuffer.wrap(text.getBytes(StandardCharsets.UTF_8));
    }

    private static String chain(TestCertificates.Issued issued) throws Exception {
        return Files.readString(issued.chainPem());
    }

    private static Path write(Path dir, String name, String content) throws Exception {
        Path file = dir.resolve(name);
        TestCertificates.replace(file, content);
        return file;
    }

    @Test
    void pushesSucceedWithTheClientCertificateAndFailWithout(@TempDir Path dir) throws Exception {
        // Given an endpoint that requires a client certificate issued by CA A
        Path ca = write(dir, "ca.pem", Files.readString(caA.certPem()));
        Path cert = write(dir, "tls.crt", chain(client1));
        Path key = write(dir, "tls.key", TestCertificates.pkcs8Pem(client1.key()));
        try (TlsTestEndpoint endpoint = new TlsTestEndpoint(serverA, caA)) {
            // When a forwarder with the client certificate (PEM, PKCS#8) pushes
            try (Forwarder with = forwarder(endpoint.url(), Map.of(ForwarderConfig.TLS_CA_FILE, ca.toString(),
                    ForwarderConfig.TLS_CERT_FILE, cert.toString(), ForwarderConfig.TLS_KEY_FILE, key.toString()))) {
                with.offer(Map.of("kct-client-instance-id", "a"), payload("with-cert"));
                // Then the push arrives with the certificate's subject
                assertTrue(Waits.until(() -> with.metrics().value("forwarded-total") == 1.0, Waits.EVENT_MS));
                assertEquals(1, endpoint.countFrom("CN=client-1"));
            }
            // When a forwarder that trusts the endpoint but has no client certificate pushes
            try (Forwarder without = forwarder(endpoint.url(), Map.of(ForwarderConfig.TLS_CA_FILE, ca.toString(),
                    ForwarderConfig.RETRIES_MAX, "1"))) {
                without.offer(Map.of("kct-client-instance-id", "b"), payload("without-cert"));
                // Then the handshake is refused: the push fails after its retries and never arrives
                assertTrue(Waits.until(() -> without.metrics().value("failed-total") == 1.0, Waits.EVENT_MS));
                assertTrue(without.metrics().value("endpoint-unavailable-total") >= 2.0);
                assertEquals(0.0, without.metrics().value("forwarded-total"));
                assertEquals(1, endpoint.received.size());
            }
        }
    }

    @Test
    void keystoreClientCertificateWithTls13AndAChosenCipherSuite(@TempDir Path dir) throws Exception {
        // Given the client certificate in a PKCS#12 keystore, TLS 1.3 only and one cipher suite
        Path keystore = TestCertificates.keystore(client2, dir.resolve("client.p12"));
        Path ca = write(dir, "ca.pem", Files.readString(caA.certPem()));
        try (TlsTestEndpoint endpoint = new TlsTestEndpoint(serverA, caA);
             Forwarder f = forwarder(endpoint.url(), Map.of(ForwarderConfig.TLS_CA_FILE, ca.toString(),
                 ForwarderConfig.TLS_KEYSTORE_PATH, keystore.toString(),
                 ForwarderConfig.TLS_KEYSTORE_PASSWORD, TestCertificates.PASSWORD,
                 ForwarderConfig.TLS_MIN_VERSION, "TLSv1.3",
                 ForwarderConfig.TLS_CIPHER_SUITES, "TLS_AES_256_GCM_SHA384"))) {
            // When it pushes
            f.offer(Map.of("kct-client-instance-id", "a"), payload("keystore"));
            // Then the push arrives with the keystore's certificate
            assertTrue(Waits.until(() -> f.metrics().value("forwarded-total") == 1.0, Waits.EVENT_MS));
            assertEquals(1, endpoint.countFrom("CN=client-2"));
        }
    }

    @Test
    void rotatingTheClientCertificateAndTheCaUnderLoadLosesNoQueuedPush(@TempDir Path dir) throws Exception {
        // Given a forwarder trusting CA A with client-1 (RSA, PKCS#1 PEM), and an endpoint served by server-a
        Path ca = write(dir, "ca.pem", Files.readString(caA.certPem()));
        Path cert = write(dir, "tls.crt", chain(client1));
        Path key = write(dir, "tls.key", TestCertificates.traditionalPem(client1.key()));
        AtomicBoolean stop = new AtomicBoolean();
        AtomicInteger offered = new AtomicInteger();
        try (TlsTestEndpoint endpoint = new TlsTestEndpoint(serverA, caA);
             Forwarder f = forwarder(endpoint.url(), Map.of(ForwarderConfig.TLS_CA_FILE, ca.toString(),
                 ForwarderConfig.TLS_CERT_FILE, cert.toString(), ForwarderConfig.TLS_KEY_FILE, key.toString()))) {
            // and pushes offered without pause (each from its own client, so none supersedes another)
            Thread producer = new Thread(() -> {
                while (!stop.get()) {
                    int i = offered.get();
                    if (f.offer(Map.of("kct-client-instance-id", "client-" + i), payload("push-" + i))) {
                        offered.incrementAndGet();
                    }
                    LockSupport.parkNanos(TimeUnit.MILLISECONDS.toNanos(2));  // a steady load, not a wait
                }
            }, "test-producer");
            producer.start();
            try {
                assertTrue(Waits.until(() -> endpoint.countFrom("CN=client-1") >= 20, Waits.EVENT_MS));
                // When the CA file becomes the bundle A+B (overlap), and then the endpoint moves to server-b (CA B)
                double reloads = f.metrics().value("tls-reloads-total");
                TestCertificates.replace(ca, Files.readString(caA.certPem()) + Files.readString(caB.certPem()));
                assertTrue(Waits.until(() -> f.metrics().value("tls-reloads-total") > reloads, Waits.EVENT_MS));
                endpoint.serve(serverB);
                // and the client certificate is rotated to client-2 (EC, SEC1 PEM): key first, then certificate
                double reloads2 = f.metrics().value("tls-reloads-total");
                TestCertificates.replace(key, TestCertificates.traditionalPem(client2.key()));
                TestCertificates.replace(cert, chain(client2));
                // Then new connections present client-2
                assertTrue(Waits.until(() -> f.metrics().value("tls-reloads-total") > reloads2, Waits.EVENT_MS));
                assertTrue(Waits.until(() -> endpoint.countFrom("CN=client-2") >= 20, Waits.EVENT_MS));
                // When CA A leaves the CA file
                double reloads3 = f.metrics().value("tls-reloads-total");
                TestCertificates.replace(ca, Files.readString(caB.certPem()));
                assertTrue(Waits.until(() -> f.metrics().value("tls-reloads-total") > reloads3, Waits.EVENT_MS));
                long before = endpoint.received.size();
                // Then pushes keep arriving (new connections verify server-b against CA B alone)
                assertTrue(Waits.until(() -> endpoint.received.size() >= before + 20, Waits.EVENT_MS));
            } finally {
                stop.set(true);
                producer.join();
            }
            // and every offered push was delivered exactly once: none dropped, none failed
            int total = offered.get();
            assertTrue(Waits.until(() -> f.metrics().value("forwarded-total") == total, Waits.EVENT_MS),
                "forwarded " + f.metrics().value("forwarded-total") + " of " + total + ", dropped "
                    + f.metrics().value("dropped-total") + ", failed " + f.metrics().value("failed-total")
                    + ", retries " + f.metrics().value("retries-total"));
            assertEquals(0.0, f.metrics().value("dropped-total"));
            assertEquals(0.0, f.metrics().value("failed-total"));
            Set<String> bodies = endpoint.received.stream().map(TlsTestEndpoint.Received::body)
                .collect(Collectors.toCollection(TreeSet::new));
            assertEquals(total, endpoint.received.size());
            assertEquals(total, bodies.size());
            assertTrue(total > 60, "pushes offered during the rotations: " + total);
        }
    }

    @Test
    void aCaFileMissingAtStartIsUsedOnceItAppears(@TempDir Path dir) throws Exception {
        // Given a forwarder whose CA file does not exist yet (the operator issues it after the broker started)
        Path ca = dir.resolve("ca.pem");
        Path cert = write(dir, "tls.crt", chain(client1));
        Path key = write(dir, "tls.key", TestCertificates.pkcs8Pem(client1.key()));
        try (TlsTestEndpoint endpoint = new TlsTestEndpoint(serverA, caA);
             Forwarder f = forwarder(endpoint.url(), Map.of(ForwarderConfig.TLS_CA_FILE, ca.toString(),
                 ForwarderConfig.TLS_CERT_FILE, cert.toString(), ForwarderConfig.TLS_KEY_FILE, key.toString(),
                 ForwarderConfig.RETRIES_MAX, "100",
                 ForwarderConfig.RETRY_BACKOFF_MAX_MS, "1000"))) {  // still retrying when the file appears
            // When pushes are offered, they fail as for an unreachable endpoint (counted, retried)
            for (int i = 0; i < 5; i++) {
                f.offer(Map.of("kct-client-instance-id", "client-" + i), payload("push-" + i));
            }
            assertTrue(Waits.until(() -> f.metrics().value("endpoint-unavailable-total") >= 2.0, Waits.EVENT_MS));
            assertEquals(0, endpoint.received.size());
            // When the CA file appears
            TestCertificates.replace(ca, Files.readString(caA.certPem()));
            // Then every queued push is delivered (at its next retry, <= 1 s)
            assertTrue(Waits.until(() -> f.metrics().value("forwarded-total") == 5.0, Waits.EVENT_MS));
            assertEquals(5, endpoint.received.size());
            assertEquals(0.0, f.metrics().value("failed-total"));
        }
    }

    @Test
    void aMalformedCaFileKeepsThePreviousMaterial(@TempDir Path dir) throws Exception {
        // Given a forwarder that delivered a push with a valid CA file
        Path ca = write(dir, "ca.pem", Files.readString(caA.certPem()));
        Path cert = write(dir, "tls.crt", chain(client1));
        Path key = write(dir, "tls.key", TestCertificates.pkcs8Pem(client1.key()));
        try (TlsTestEndpoint first = new TlsTestEndpoint(serverA, caA);
             TlsTestEndpoint second = new TlsTestEndpoint(serverA, caA);
             Forwarder f = forwarder(first.url(), Map.of(ForwarderConfig.TLS_CA_FILE, ca.toString(),
                 ForwarderConfig.TLS_CERT_FILE, cert.toString(), ForwarderConfig.TLS_KEY_FILE, key.toString()))) {
            f.offer(Map.of("kct-client-instance-id", "a"), payload("before"));
            assertTrue(Waits.until(() -> f.metrics().value("forwarded-total") == 1.0, Waits.EVENT_MS));
            // When the CA file is overwritten with something that is not a certificate
            TestCertificates.replace(ca, "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n");
            // (the files are looked at when a push is sent and a check is due)
            f.offer(Map.of("kct-client-instance-id", "b"), payload("during"));
            assertTrue(Waits.until(() -> f.metrics().value("tls-reload-errors-total") >= 1.0, Waits.EVENT_MS));
            assertTrue(Waits.until(() -> f.metrics().value("forwarded-total") == 2.0, Waits.EVENT_MS));
            // Then a new connection (to another endpoint) still handshakes with the previous material
            f.reconfigure(URI.create(second.url()), null);
            f.offer(Map.of("kct-client-instance-id", "c"), payload("after"));
            assertTrue(Waits.until(() -> f.metrics().value("forwarded-total") == 3.0, Waits.EVENT_MS));
            assertEquals(1, second.countFrom("CN=client-1"));
            assertEquals(0.0, f.metrics().value("tls-reloads-total"));
        }
    }

    @Test
    void aTruststoreUnreadableAtStartIsUsedOnceFixed(@TempDir Path dir) throws Exception {
        // Given a truststore file that is not a keystore at start, and a keystore client certificate
        Path truststore = write(dir, "trust.p12", "not a keystore");
        Path keystore = TestCertificates.keystore(client1, dir.resolve("client.p12"));
        try (TlsTestEndpoint endpoint = new TlsTestEndpoint(serverA, caA);
             Forwarder f = forwarder(endpoint.url(), Map.of(
                 ForwarderConfig.TLS_TRUSTSTORE_PATH, truststore.toString(),
                 ForwarderConfig.TLS_TRUSTSTORE_PASSWORD, TestCertificates.PASSWORD,
                 ForwarderConfig.TLS_KEYSTORE_PATH, keystore.toString(),
                 ForwarderConfig.TLS_KEYSTORE_PASSWORD, TestCertificates.PASSWORD,
                 ForwarderConfig.RETRIES_MAX, "100",
                 // The pushes must still be retrying when the truststore is fixed: 100 retries of up to 50 ms
                 // (the default here) gave ~5 s, which a loaded machine spent before the PKCS#12 file was written
                 ForwarderConfig.RETRY_BACKOFF_MAX_MS, "1000"))) {
            // Then the broker still starts; the load error is counted and pushes fail as for an unreachable endpoint
            assertEquals(1.0, f.metrics().value("tls-reload-errors-total"));
            for (int i = 0; i < 3; i++) {
                f.offer(Map.of("kct-client-instance-id", "client-" + i), payload("push-" + i));
            }
            assertTrue(Waits.until(() -> f.metrics().value("endpoint-unavailable-total") >= 2.0, Waits.EVENT_MS));
            assertEquals(0, endpoint.received.size());
            // When a PKCS#12 truststore holding CA A replaces it
            java.security.KeyStore trust = java.security.KeyStore.getInstance("PKCS12");
            trust.load(null, null);
            trust.setCertificateEntry("ca-a", caA.certificate());
            Path tmp = dir.resolve("trust.p12.tmp");
            try (var out = Files.newOutputStream(tmp)) {
                trust.store(out, TestCertificates.PASSWORD.toCharArray());
            }
            Files.move(tmp, truststore, java.nio.file.StandardCopyOption.REPLACE_EXISTING,
                java.nio.file.StandardCopyOption.ATOMIC_MOVE);
            // Then every queued push is delivered with the keystore's certificate (at its next retry, <= 1 s)
            assertTrue(Waits.until(() -> f.metrics().value("forwarded-total") == 3.0, Waits.EVENT_MS));
            assertEquals(3, endpoint.countFrom("CN=client-1"));
            assertEquals(0.0, f.metrics().value("failed-total"));
        }
    }

    @Test
    void pemKeysInEveryFormMatchTheirCertificates() throws Exception {
        for (TestCertificates.Issued issued : new TestCertificates.Issued[] {client1, client2}) {
            for (String pem : new String[] {TestCertificates.pkcs8Pem(issued.key()),
                    TestCertificates.traditionalPem(issued.key())}) {
                // Given a PEM key (with EC PARAMETERS before it, as `openssl ecparam -genkey` writes)
                byte[] content = ("-----BEGIN EC PARAMETERS-----\nBggqhkjOPQMBBw==\n-----END EC PARAMETERS-----\n"
                    + pem).getBytes(StandardCharsets.US_ASCII);
                // When it is read, Then it is the same key and it matches its certificate
                PrivateKey key = PemFiles.privateKey(content, "tls.key");
                assertEquals(issued.key().getAlgorithm(), key.getAlgorithm());
                if (key instanceof java.security.interfaces.ECPrivateKey ec) {
                    assertEquals(((java.security.interfaces.ECPrivateKey) issued.key()).getS(), ec.getS());
                } else {
                    assertEquals(((java.security.interfaces.RSAPrivateKey) issued.key()).getPrivateExponent(),
                        ((java.security.interfaces.RSAPrivateKey) key).getPrivateExponent());
                }
                PemFiles.checkPair(key, issued.chain().get(0), "pair");
            }
        }
    }

    @Test
    void aKeyOfAnotherCertificateOrAnEncryptedKeyIsRefusedWithTheFileNamed() throws Exception {
        // Given client-2's key and client-1's certificate (a half-done rotation)
        GeneralSecurityException mismatch = assertThrows(GeneralSecurityException.class,
            () -> PemFiles.checkPair(client2.key(), client1.chain().get(0), "tls.key=/k and tls.crt=/c"));
        assertTrue(mismatch.getMessage().contains("tls.key=/k") && mismatch.getMessage().contains("CN=client-1"),
            mismatch.getMessage());
        // An RSA key of another certificate is caught as well
        TestCertificates.Issued other = new TestCertificates(certs).issue(caA, "client-3", "RSA");
        assertThrows(GeneralSecurityException.class,
            () -> PemFiles.checkPair(other.key(), client1.chain().get(0), "pair"));
        // An encrypted key is refused with what to do instead
        GeneralSecurityException encrypted = assertThrows(GeneralSecurityException.class, () -> PemFiles.privateKey(
            "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n"
                .getBytes(StandardCharsets.US_ASCII), "kct.telemetry.tls.key.file=/k"));
        assertTrue(encrypted.getMessage().contains("kct.telemetry.tls.key.file=/k")
            && encrypted.getMessage().contains("keystore"), encrypted.getMessage());
        // and a file with no key says what it expected
        GeneralSecurityException none = assertThrows(GeneralSecurityException.class,
            () -> PemFiles.privateKey("hello".getBytes(StandardCharsets.US_ASCII), "k"));
        assertTrue(none.getMessage().contains("BEGIN PRIVATE KEY"), none.getMessage());
    }
}
