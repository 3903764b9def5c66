package dev.kct.telemetry;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.kafka.common.config.ConfigException;
import org.junit.jupiter.api.Test;

/** The TLS properties: safe defaults, and contradictions refused with the property and the rule named. */
class TlsConfigTest {

    private static ForwarderConfig parse(String... keyValues) {
        Map<String, Object> configs = new HashMap<>();
        for (int i = 0; i < keyValues.length; i += 2) {
            configs.put(keyValues[i], keyValues[i + 1]);
        }
        return ForwarderConfig.parse(configs);
    }

    private static String refused(String... keyValues) {
        return assertThrows(ConfigException.class, () -> parse(keyValues)).getMessage();
    }

    @Test
    void defaultsOfferTls12AndNewerWithTheJvmsCipherSuites() {
        ForwarderConfig config = parse();
        assertEquals(List.of("TLSv1.3", "TLSv1.2"), config.tlsProtocols);
        assertEquals(List.of(), config.tlsCipherSuites);
        assertEquals(10_000, config.tlsReloadCheckMs);
        assertEquals("PKCS12", config.tlsKeystoreType);
    }

    @Test
    void minVersionTls13OffersOnlyTls13AndOlderVersionsAreRefused() {
        assertEquals(List.of("TLSv1.3"), parse(ForwarderConfig.TLS_MIN_VERSION, "TLSv1.3").tlsProtocols);
        String message = refused(ForwarderConfig.TLS_MIN_VERSION, "TLSv1.1");
        assertTrue(message.contains(ForwarderConfig.TLS_MIN_VERSION) && message.contains("TLSv1.1")
            && message.contains("TLSv1.2"), message);
    }

    @Test
    void cipherSuitesAreAListAndUnknownNamesAreRefused() {
        assertEquals(List.of("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384"), parse(
            ForwarderConfig.TLS_CIPHER_SUITES, " TLS_AES_128_GCM_SHA256, TLS_AES_256_GCM_SHA384 ").tlsCipherSuites);
        String message = refused(ForwarderConfig.TLS_CIPHER_SUITES, "TLS_AES_128_GCM_SHA256,TLS_NOT_A_SUITE");
        assertTrue(message.contains("[TLS_NOT_A_SUITE]") && message.contains(ForwarderConfig.TLS_CIPHER_SUITES),
            message);
    }

    @Test
    void aCertificateWithoutItsKeyOrAKeyWithoutItsCertificateIsRefused() {
        String noKey = refused(ForwarderConfig.TLS_CERT_FILE, "/c.pem");
        assertTrue(noKey.contains(ForwarderConfig.TLS_CERT_FILE) && noKey.contains("set " + ForwarderConfig.TLS_KEY_FILE),
            noKey);
        String noCert = refused(ForwarderConfig.TLS_KEY_FILE, "/k.pem");
        assertTrue(noCert.contains("set " + ForwarderConfig.TLS_CERT_FILE), noCert);
    }

    @Test
    void pemAndKeystoreTogetherAreRefused() {
        String message = refused(ForwarderConfig.TLS_CERT_FILE, "/c.pem", ForwarderConfig.TLS_KEY_FILE, "/k.pem",
            ForwarderConfig.TLS_KEYSTORE_PATH, "/client.p12");
        assertTrue(message.contains("not both") && message.contains(ForwarderConfig.TLS_KEYSTORE_PATH), message);
    }

    @Test
    void aKeystorePasswordWithoutAKeystoreIsRefusedWithoutShowingIt() {
        String message = refused(ForwarderConfig.TLS_KEYSTORE_PASSWORD, "s3cret");
        assertTrue(message.contains(ForwarderConfig.TLS_KEYSTORE_PATH) && !message.contains("s3cret"), message);
    }

    @Test
    void caFileAndTruststoreTogetherAreRefused() {
        String message = refused(ForwarderConfig.TLS_CA_FILE, "/ca.pem", ForwarderConfig.TLS_TRUSTSTORE_PATH, "/t.p12");
        assertTrue(message.contains("not both"), message);
    }
}
