package dev.kct.telemetry;

import java.nio.ByteBuffer;

/**
 * The compression a push's payload is still in, when the broker handed it over compressed.
 *
 * <p>KIP-714 says the broker decompresses a push before the plugin sees it, and Kafka 3.8 and later do.
 * Kafka 3.7 does not (found by tests/e2e/test_plugin_versions_e2e.py: 3.7.2 hands over librdkafka's zstd
 * frames as they came; Java clients of 3.7 send uncompressed). An OTLP {@code MetricsData} message starts with the tag
 * of its field 1 ({@code 0x0a}), never with a zstd or gzip magic number, so the first bytes tell the two
 * apart; the plugin then sends the bytes as they are with {@code Content-Encoding}, which OTLP/HTTP
 * receivers decode. lz4 and snappy have no OTLP/HTTP encoding and go as they are.
 */
final class PayloadEncoding {

    static final String HEADER = "Content-Encoding";

    private PayloadEncoding() {
    }

    /** "zstd", "gzip", or null for anything else (an uncompressed payload among them). */
    static String of(ByteBuffer data) {
        int p = data.position();
        int n = data.remaining();
        if (n >= 4 && (data.get(p) & 0xff) == 0x28 && (data.get(p + 1) & 0xff) == 0xb5
            && (data.get(p + 2) & 0xff) == 0x2f && (data.get(p + 3) & 0xff) == 0xfd) {
            return "zstd";
        }
        if (n >= 2 && (data.get(p) & 0xff) == 0x1f && (data.get(p + 1) & 0xff) == 0x8b) {
            return "gzip";
        }
        return null;
    }
}
