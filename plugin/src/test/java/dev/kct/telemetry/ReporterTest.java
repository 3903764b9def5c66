package dev.kct.telemetry;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.util.Map;

import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.server.telemetry.ClientTelemetryPayload;
import org.junit.jupiter.api.Test;

class ReporterTest {

    static ClientTelemetryPayload payload(Uuid id, boolean terminating, byte[] data) {
        return new ClientTelemetryPayload() {
            @Override
            public Uuid clientInstanceId() {
                return id;
            }

            @Override
            public boolean isTerminating() {
                return terminating;
            }

            @Override
            public String contentType() {
                return "application/x-protobuf";
            }

            @Override
            public ByteBuffer data() {
                return ByteBuffer.wrap(data);
            }
        };
    }

    @Test
    @SuppressWarnings("removal")
    void receiverClassForwardsWithoutInterval() throws Exception {
        try (TestEndpoint endpoint = new TestEndpoint(n -> TestEndpoint.Answer.ok())) {
            KctClientTelemetryReporter reporter = new KctClientTelemetryReporter();
            reporter.configure(Map.of("broker.id", "1", ForwarderConfig.ENDPOINT, endpoint.url(),
                ForwarderConfig.JMX_PREFIX, "kct.telemetry.receivertest"));
            reporter.clientReceiver().exportMetrics(PushLabelsTest.context("p"),
                payload(Uuid.randomUuid(), false, new byte[] {9}));
            assertTrue(Waits.until(() -> endpoint.received.size() == 1, Waits.EVENT_MS));
            Map<String, String> h = endpoint.received.get(0).headers();
            assertEquals("false", h.get("kct-terminating"));
            assertEquals("1", h.get("kct-broker-id"));
            assertTrue(!h.containsKey("kct-push-interval-ms"));
            reporter.close();
        }
    }

    @Test
    @SuppressWarnings("removal")
    void compressedPayloadGoesWithItsContentEncoding() throws Exception {
        try (TestEndpoint endpoint = new TestEndpoint(n -> TestEndpoint.Answer.ok())) {
            // Given the 3.7+ reporter, and pushes as a broker before 4.2 hands them over: still compressed
            KctClientTelemetryReporter reporter = new KctClientTelemetryReporter();
            reporter.configure(Map.of("broker.id", "1", ForwarderConfig.ENDPOINT, endpoint.url(),
                ForwarderConfig.JMX_PREFIX, "kct.telemetry.encodingtest"));
            byte[] zstd = {0x28, (byte) 0xb5, 0x2f, (byte) 0xfd, 0, 0x58};
            byte[] gzip = {0x1f, (byte) 0x8b, 8, 0};
            byte[] otlp = {0x0a, 2, 0x0a, 0};
            // When it forwards a zstd frame, a gzip stream and a plain OTLP message (one client each)
            reporter.clientReceiver().exportMetrics(PushLabelsTest.context("z"), payload(Uuid.randomUuid(), false, zstd));
            reporter.clientReceiver().exportMetrics(PushLabelsTest.context("g"), payload(Uuid.randomUuid(), false, gzip));
            reporter.clientReceiver().exportMetrics(PushLabelsTest.context("o"), payload(Uuid.randomUuid(), false, otlp));
            assertTrue(Waits.until(() -> endpoint.received.size() == 3, Waits.EVENT_MS));
            // Then the compressed ones go as they are, with Content-Encoding; the plain one without it
            Map<String, String> encodings = new java.util.HashMap<>();
            for (TestEndpoint.Received r : endpoint.received) {
                encodings.put(r.headers().get("kct-client-id"), r.headers().getOrDefault("content-encoding", "none"));
            }
            assertEquals(Map.of("z", "zstd", "g", "gzip", "o", "none"), encodings);
            reporter.close();
        }
    }

    @Test
    @SuppressWarnings("removal")
    void badConfigurationNamesTheProperty() {
        KctClientTelemetryReporter reporter = new KctClientTelemetryReporter();
        ConfigException e = assertThrows(ConfigException.class,
            () -> reporter.configure(Map.of(ForwarderConfig.ENDPOINT, "ftp://x/")));
        assertTrue(e.getMessage().contains("kct.telemetry.endpoint"), e.getMessage());
    }
}
