package dev.kct.telemetry;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.security.KeyStore;
import java.security.PrivateKey;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.security.cert.X509Certificate;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.concurrent.TimeUnit;

import javax.net.ssl.KeyManager;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.TrustManagerFactory;
import javax.net.ssl.X509ExtendedKeyManager;

/**
 * Test CAs and certificates issued with the JDK's keytool (the plugin has no crypto dependency, and the JDK
 * has no public API that signs certificates). Private keys are written as PEM in the three forms the plugin
 * reads: PKCS#8, PKCS#1 (RSA) and SEC1 (EC).
 */
final class TestCertificates {

    static final String PASSWORD = "changeit";
    private final Path dir;

    TestCertificates(Path dir) {
        this.dir = dir;
    }

    /** A CA: its keystore and its certificate as PEM. */
    record Ca(String name, Path keystore, Path certPem) {
        X509Certificate certificate() throws Exception {
            try (var in = Files.newInputStream(certPem)) {
                return (X509Certificate) CertificateFactory.getInstance("X.509").generateCertificate(in);
            }
        }
    }

    /** An issued certificate: its key pair's keystore, the PEM chain (leaf, CA) and the private key. */
    record Issued(String name, Path keystore, Path chainPem, PrivateKey key, List<X509Certificate> chain) {
    }

    Ca ca(String name) throws Exception {
        Path store = dir.resolve(name + ".p12");
        keytool("-genkeypair", "-alias", "ca", "-keyalg", "EC", "-groupname", "secp256r1", "-dname", "CN=" + name,
            "-ext", "bc:c", "-validity", "2", "-keystore", store.toString(), "-storetype", "PKCS12",
            "-storepass", PASSWORD);
        Path pem = dir.resolve(name + ".pem");
        keytool("-exportcert", "-rfc", "-alias", "ca", "-keystore", store.toString(), "-storepass", PASSWORD,
            "-file", pem.toString());
        return new Ca(name, store, pem);
    }

    /** A certificate for 127.0.0.1/localhost, usable by a server and a client; keyAlg RSA or EC. */
    Issued issue(Ca ca, String name, String keyAlg) throws Exception {
        Path store = dir.resolve(name + ".p12");
        List<String> gen = new ArrayList<>(List.of("-genkeypair", "-alias", "key", "-keyalg", keyAlg,
            "-dname", "CN=" + name, "-validity", "2", "-keystore", store.toString(), "-storetype", "PKCS12",
            "-storepass", PASSWORD));
        gen.addAll(keyAlg.equals("EC") ? List.of("-groupname", "secp256r1") : List.of("-keysize", "2048"));
        keytool(gen.toArray(new String[0]));
        Path csr = dir.resolve(name + ".csr");
        keytool("-certreq", "-alias", "key", "-keystore", store.toString(), "-storepass", PASSWORD,
            "-file", csr.toString());
        Path leaf = dir.resolve(name + ".leaf.pem");
        keytool("-gencert", "-alias", "ca", "-keystore", ca.keystore().toString(), "-storepass", PASSWORD,
            "-infile", csr.toString(), "-outfile", leaf.toString(), "-rfc", "-validity", "2",
            "-ext", "san=ip:127.0.0.1,dns:localhost", "-ext", "eku=serverAuth,clientAuth");
        Path chain = dir.resolve(name + ".chain.pem");
        Files.writeString(chain, Files.readString(leaf) + Files.readString(ca.certPem()));
        KeyStore ks = KeyStore.getInstance("PKCS12");
        try (var in = Files.newInputStream(store)) {
            ks.load(in, PASSWORD.toCharArray());
        }
        PrivateKey key = (PrivateKey) ks.getKey("key", PASSWORD.toCharArray());
        List<X509Certificate> certs = new ArrayList<>();
        try (var in = Files.newInputStream(chain)) {
            for (Certificate c : CertificateFactory.getInstance("X.509").generateCertificates(in)) {
                certs.add((X509Certificate) c);
            }
        }
        return new Issued(name, store, chain, key, certs);
    }

    /** A PKCS#12 keystore holding the issued key with its CA-signed chain (password {@link #PASSWORD}). */
    static Path keystore(Issued issued, Path file) throws Exception {
        KeyStore ks = KeyStore.getInstance("PKCS12");
        ks.load(null, null);
        ks.setKeyEntry("client", issued.key(), PASSWORD.toCharArray(), issued.chain().toArray(new Certificate[0]));
        try (var out = Files.newOutputStream(file)) {
            ks.store(out, PASSWORD.toCharArray());
        }
        return file;
    }

    /** A key manager serving this key and chain. */
    static X509ExtendedKeyManager keyManager(Issued issued) throws Exception {
        KeyStore keys = KeyStore.getInstance("PKCS12");
        keys.load(null, null);
        keys.setKeyEntry("key", issued.key(), PASSWORD.toCharArray(), issued.chain().toArray(new Certificate[0]));
        KeyManagerFactory kmf = KeyManagerFactory.getInstance("PKIX");
        kmf.init(keys, PASSWORD.toCharArray());
        return (X509ExtendedKeyManager) kmf.getKeyManagers()[0];
    }

    /** A server-side SSL context: these keys, trusting clients issued by the given CAs. */
    static SSLContext serverContext(X509ExtendedKeyManager keys, Ca... clientCas) throws Exception {
        KeyStore trust = KeyStore.getInstance("PKCS12");
        trust.load(null, null);
        for (Ca ca : clientCas) {
            try (var in = Files.newInputStream(ca.certPem())) {
                trust.setCertificateEntry(ca.name(), CertificateFactory.getInstance("X.509").generateCertificate(in));
            }
        }
        TrustManagerFactory tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
        tmf.init(trust);
        SSLContext ctx = SSLContext.getInstance("TLS");
        ctx.init(new KeyManager[] {keys}, tmf.getTrustManagers(), null);
        return ctx;
    }

    /** The key as PKCS#8 PEM (-----BEGIN PRIVATE KEY-----), as cert-manager writes it. */
    static String pkcs8Pem(PrivateKey key) {
        return pem("PRIVATE KEY", key.getEncoded());
    }

    /** The key in openssl's traditional form: PKCS#1 for RSA, SEC1 with the curve for EC. */
    static String traditionalPem(PrivateKey key) {
        Der pkcs8 = Der.read(key.getEncoded(), 0);
        Der version = Der.read(key.getEncoded(), pkcs8.contentStart);
        Der algorithm = Der.read(key.getEncoded(), version.end);
        Der inner = Der.read(key.getEncoded(), algorithm.end);
        byte[] innerBytes = slice(key.getEncoded(), inner.contentStart, inner.end);
        if (key.getAlgorithm().equals("RSA")) {
            return pem("RSA PRIVATE KEY", innerBytes);  // PKCS#8 wraps PKCS#1 as-is
        }
        // PKCS#8 keeps the curve in the algorithm identifier; SEC1 keeps it in its own [0] field
        Der algorithmOid = Der.read(key.getEncoded(), algorithm.contentStart);
        Der curve = Der.read(key.getEncoded(), algorithmOid.end);
        Der sec1 = Der.read(innerBytes, 0);
        Der sec1Version = Der.read(innerBytes, sec1.contentStart);
        Der privateKey = Der.read(innerBytes, sec1Version.end);
        byte[] rebuilt = Der.tlv(0x30, slice(innerBytes, sec1Version.start, privateKey.end),
            Der.tlv(0xa0, slice(key.getEncoded(), curve.start, curve.end)));
        return pem("EC PRIVATE KEY", rebuilt);
    }

    static String pem(String type, byte[] der) {
        return "-----BEGIN " + type + "-----\n" + Base64.getMimeEncoder(64, "\n".getBytes(StandardCharsets.US_ASCII))
            .encodeToString(der) + "\n-----END " + type + "-----\n";
    }

    /** Replace a file in one rename, as a Kubernetes Secret volume does. */
    static void replace(Path target, String content) throws IOException {
        Path tmp = target.resolveSibling(target.getFileName() + ".tmp");
        Files.writeString(tmp, content);
        Files.move(tmp, target, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
    }

    private static byte[] slice(byte[] b, int from, int to) {
        byte[] out = new byte[to - from];
        System.arraycopy(b, from, out, 0, out.length);
        return out;
    }

    private static void keytool(String... args) throws Exception {
        List<String> command = new ArrayList<>();
        command.add(Path.of(System.getProperty("java.home"), "bin", "keytool").toString());
        command.add("-J-XX:TieredStopAtLevel=1");  // a short-lived JVM: start fast
        command.addAll(List.of(args));
        Process p = new ProcessBuilder(command).redirectErrorStream(true).start();
        byte[] out = p.getInputStream().readAllBytes();
        if (!p.waitFor(120, TimeUnit.SECONDS) || p.exitValue() != 0) {
            throw new IllegalStateException("keytool " + String.join(" ", args) + " failed: "
                + new String(out, StandardCharsets.UTF_8));
        }
    }

    /** A DER element's header (test-side twin of the plugin's own reader, kept apart on purpose). */
    private record Der(int start, int tag, int contentStart, int end) {
        static Der read(byte[] b, int at) {
            int first = b[at + 1] & 0xff;
            int length = first;
            int header = 2;
            if (first >= 0x80) {
                int n = first & 0x7f;
                length = 0;
                for (int i = 0; i < n; i++) {
                    length = (length << 8) | (b[at + 2 + i] & 0xff);
                }
                header += n;
            }
            return new Der(at, b[at] & 0xff, at + header, at + header + length);
        }

        static byte[] tlv(int tag, byte[]... parts) {
            ByteArrayOutputStream content = new ByteArrayOutputStream();
            for (byte[] p : parts) {
                content.writeBytes(p);
            }
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            out.write(tag);
            int length = content.size();
            if (length < 0x80) {
                out.write(length);
            } else if (length < 0x100) {
                out.write(0x81);
                out.write(length);
            } else {
                out.write(0x82);
                out.write(length >>> 8);
                out.write(length);
            }
            out.writeBytes(content.toByteArray());
            return out.toByteArray();
        }
    }
}
