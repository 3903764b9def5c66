package dev.kct.telemetry;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.KeyFactory;
import java.security.PrivateKey;
import java.security.PublicKey;
import java.security.Signature;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.security.cert.X509Certificate;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * PEM certificates and private keys as the tools that issue them write them: cert-manager and
 * Kubernetes {@code kubernetes.io/tls} Secrets (PKCS#8 or PKCS#1), {@code openssl} (PKCS#8, PKCS#1
 * {@code RSA PRIVATE KEY}, SEC1 {@code EC PRIVATE KEY}). The JDK reads only PKCS#8, and the plugin has
 * no dependencies of its own, so the two older forms are wrapped into PKCS#8 here with a few lines of DER.
 *
 * <p>Errors are {@link GeneralSecurityException}s whose message says what is wrong with which file, for
 * the broker's log.
 */
final class PemFiles {

    private static final Pattern BLOCK = Pattern.compile(
        "-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \\1-----", Pattern.DOTALL);
    /** DER of OID 1.2.840.113549.1.1.1 (rsaEncryption) followed by NULL parameters. */
    private static final byte[] RSA_ALGORITHM = {
        0x06, 0x09, 0x2a, (byte) 0x86, 0x48, (byte) 0x86, (byte) 0xf7, 0x0d, 0x01, 0x01, 0x01, 0x05, 0x00};
    /** DER of OID 1.2.840.10045.2.1 (id-ecPublicKey). */
    private static final byte[] EC_ALGORITHM = {0x06, 0x07, 0x2a, (byte) 0x86, 0x48, (byte) 0xce, 0x3d, 0x02, 0x01};
    private static final String[] PKCS8_ALGORITHMS = {"RSA", "EC", "EdDSA", "RSASSA-PSS"};

    private PemFiles() {
    }

    /** Every certificate in a PEM (or DER) file, in order; at least one. */
    static List<X509Certificate> certificates(byte[] content, String what) throws GeneralSecurityException {
        List<X509Certificate> out = new ArrayList<>();
        for (Certificate c : CertificateFactory.getInstance("X.509")
                .generateCertificates(new ByteArrayInputStream(content))) {
            out.add((X509Certificate) c);
        }
        if (out.isEmpty()) {
            throw new GeneralSecurityException(what + " holds no certificate");
        }
        return out;
    }

    /** The one private key in a PEM file: PKCS#8, PKCS#1 (RSA) or SEC1 (EC); unencrypted. */
    static PrivateKey privateKey(byte[] content, String what) throws GeneralSecurityException {
        Matcher m = BLOCK.matcher(new String(content, StandardCharsets.US_ASCII));
        while (m.find()) {
            String type = m.group(1);
            String body = m.group(2);
            switch (type) {
                case "PRIVATE KEY":
                    return pkcs8(decode(body, what), what);
                case "RSA PRIVATE KEY":
                    refuseEncrypted(body, what);
                    return KeyFactory.getInstance("RSA").generatePrivate(new PKCS8EncodedKeySpec(
                        sequence(integer0(), sequence(RSA_ALGORITHM), octetString(decode(body, what)))));
                case "EC PRIVATE KEY":
                    refuseEncrypted(body, what);
                    return KeyFactory.getInstance("EC").generatePrivate(new PKCS8EncodedKeySpec(
                        sec1ToPkcs8(decode(body, what), what)));
                case "ENCRYPTED PRIVATE KEY":
                    throw new GeneralSecurityException(what + " holds an encrypted private key, which the plugin "
                        + "does not read: give an unencrypted key (a mounted Secret) or use a keystore with a password");
                default:
                    // e.g. "EC PARAMETERS" before the key (openssl ecparam -genkey): not the key
            }
        }
        throw new GeneralSecurityException(what + " holds no PEM private key (expected -----BEGIN PRIVATE KEY-----, "
            + "RSA PRIVATE KEY or EC PRIVATE KEY)");
    }

    /** Fails unless the key signs what the certificate's public key verifies: a half-rotated pair, say. */
    static void checkPair(PrivateKey key, X509Certificate cert, String what) throws GeneralSecurityException {
        String algorithm = switch (key.getAlgorithm()) {
            case "RSA" -> "SHA256withRSA";
            case "EC" -> "SHA256withECDSA";
            case "EdDSA", "Ed25519", "Ed448" -> "EdDSA";
            default -> null;
        };
        if (algorithm == null) {
            return;  // an algorithm we cannot sign a probe with: the TLS handshake will tell
        }
        PublicKey pub = cert.getPublicKey();
        String mismatch = what + ": the private key (" + key.getAlgorithm() + ") does not belong to the certificate "
            + cert.getSubjectX500Principal().getName() + " (" + pub.getAlgorithm() + ")";
        byte[] probe = "kct-telemetry key/certificate check".getBytes(StandardCharsets.US_ASCII);
        Signature signer = Signature.getInstance(algorithm);
        signer.initSign(key);
        signer.update(probe);
        byte[] signature = signer.sign();
        Signature verifier = Signature.getInstance(algorithm);
        try {
            verifier.initVerify(pub);
            verifier.update(probe);
            if (!verifier.verify(signature)) {
                throw new GeneralSecurityException(mismatch);
            }
        } catch (java.security.InvalidKeyException | java.security.SignatureException e) {
            throw new GeneralSecurityException(mismatch);
        }
    }

    private static PrivateKey pkcs8(byte[] der, String what) throws GeneralSecurityException {
        for (String algorithm : PKCS8_ALGORITHMS) {
            try {
                return KeyFactory.getInstance(algorithm).generatePrivate(new PKCS8EncodedKeySpec(der));
            } catch (GeneralSecurityException | IllegalArgumentException e) {
                // not this algorithm: try the next
            }
        }
        throw new GeneralSecurityException(what + ": a PKCS#8 private key of none of " + String.join(", ",
            PKCS8_ALGORITHMS));
    }

    private static void refuseEncrypted(String body, String what) throws GeneralSecurityException {
        if (body.contains("Proc-Type:") || body.contains("DEK-Info:")) {
            throw new GeneralSecurityException(what + " holds an encrypted private key, which the plugin does not "
                + "read: give an unencrypted key (a mounted Secret) or use a keystore with a password");
        }
    }

    private static byte[] decode(String body, String what) throws GeneralSecurityException {
        try {
            return Base64.getMimeDecoder().decode(body.trim());
        } catch (IllegalArgumentException e) {
            throw new GeneralSecurityException(what + ": bad base64 in PEM: " + e.getMessage());
        }
    }

    /**
     * SEC1 ECPrivateKey ::= SEQUENCE { version, privateKey OCTET STRING, [0] parameters, [1] publicKey }
     * becomes PKCS#8 with the curve of [0] in the algorithm identifier (PKCS#8 keeps it there).
     */
    private static byte[] sec1ToPkcs8(byte[] sec1, String what) throws GeneralSecurityException {
        try {
            Der outer = new Der(sec1, 0);
            if (outer.tag != 0x30) {
                throw new GeneralSecurityException(what + ": an EC PRIVATE KEY that is not a DER SEQUENCE");
            }
            Der field = new Der(sec1, outer.contentStart);
            byte[] curve = null;
            while (field.end <= outer.end) {
                if (field.tag == 0xa0) {
                    Der oid = new Der(sec1, field.contentStart);
                    curve = java.util.Arrays.copyOfRange(sec1, oid.start, oid.end);
                }
                if (field.end == outer.end) {
                    break;
                }
                field = new Der(sec1, field.end);
            }
            if (curve == null) {
                throw new GeneralSecurityException(what + ": an EC PRIVATE KEY without its curve; "
                    + "write it as PKCS#8 (openssl pkcs8 -topk8 -nocrypt)");
            }
            return sequence(integer0(), sequence(EC_ALGORITHM, curve), octetString(sec1));
        } catch (ArrayIndexOutOfBoundsException e) {
            throw new GeneralSecurityException(what + ": a truncated EC PRIVATE KEY");
        }
    }

    private static byte[] integer0() {
        return new byte[] {0x02, 0x01, 0x00};
    }

    private static byte[] sequence(byte[]... parts) {
        return tlv(0x30, parts);
    }

    private static byte[] octetString(byte[] content) {
        return tlv(0x04, content);
    }

    private static byte[] tlv(int tag, byte[]... parts) {
        ByteArrayOutputStream content = new ByteArrayOutputStream();
        for (byte[] p : parts) {
            content.writeBytes(p);
        }
        int length = content.size();
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        out.write(tag);
        if (length < 0x80) {
            out.write(length);
        } else {
            int bytes = length > 0xffffff ? 4 : length > 0xffff ? 3 : length > 0xff ? 2 : 1;
            out.write(0x80 | bytes);
            for (int i = bytes - 1; i >= 0; i--) {
                out.write(length >>> (8 * i));
            }
        }
        out.writeBytes(content.toByteArray());
        return out.toByteArray();
    }

    /** One DER element's header at an offset: its tag and where its content and it end. */
    private static final class Der {
        final int start;
        final int tag;
        final int contentStart;
        final int end;

        Der(byte[] b, int at) {
            start = at;
            tag = b[at] & 0xff;
            int first = b[at + 1] & 0xff;
            int length;
            int header;
            if (first < 0x80) {
                length = first;
                header = 2;
            } else {
                int n = first & 0x7f;
                length = 0;
                for (int i = 0; i < n; i++) {
                    length = (length << 8) | (b[at + 2 + i] & 0xff);
                }
                header = 2 + n;
            }
            contentStart = at + header;
            end = contentStart + length;
            if (end > b.length || length < 0) {
                throw new ArrayIndexOutOfBoundsException("DER element past the end");
            }
        }
    }
}
