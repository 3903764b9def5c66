package dev.kct.telemetry;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.util.Map;

import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.server.authorizer.AuthorizableRequestContext;
import org.apache.kafka.server.telemetry.ClientTelemetryContext;
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
    void exporterClassForwardsWithPushIntervalAndBrokerId() throws Exception {
        try (TestEndpoint endpoint = new TestEndpoint(n -> TestEndpoint.Answer.ok())) {
            // Given the 4.2+ reporter configured as the broker would (node.id + our prefix)
            KctClientTelemetryExporterReporter reporter = new KctClientTelemetryExporterReporter();
            reporter.configure(Map.of("node.id", "3", ForwarderConfig.ENDPOINT, endpoint.url(),
                ForwarderConfig.JMX_PREFIX, "kct.telemetry.reportertest"));
            AuthorizableRequestContext request = PushLabelsTest.context("consumer-9");
            ClientTelemetryContext context = new ClientTelemetryContext() {
                @Override
                public int pushIntervalMs() {
                    return 1000;
                }

                @Override
                public AuthorizableRequestContext authorizableRequestContext() {
                    return request;
                }
            };
            // When the broker hands it a terminating push
            reporter.clientTelemetryExporter().exportMetrics(context, payload(Uuid.randomUuid(), true, new byte[] {1, 2}));
            // Then the endpoint gets it with interval, broker id, client id and the terminating flag
            assertTrue(Waits.until(() -> endpoint.received.size() == 1, 5_000));
            Map<String, String> h = endpoint.received.get(0).headers();
            assertEquals("1000", h.get("kct-push-interval-ms"));
            assertEquals("3", h.get("kct-broker-id"));
            assertEquals("consumer-9", h.get("kct-client-id"));
            assertEquals("true", h.get("kct-terminating"));
            reporter.close();
        }
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
            assertTrue(Waits.until(() -> endpoint.received.size() == 1, 5_000));
            Map<String, String> h = endpoint.received.get(0).headers();
            assertEquals("false", h.get("kct-terminating"));
            assertEquals("1", h.get("kct-broker-id"));
            assertTrue(!h.containsKey("kct-push-interval-ms"));
            reporter.close();
        }
    }

    @Test
    void badConfigurationNamesTheProperty() {
        KctClientTelemetryExporterReporter reporter = new KctClientTelemetryExporterReporter();
        ConfigException e = assertThrows(ConfigException.class,
            () -> reporter.configure(Map.of(ForwarderConfig.ENDPOINT, "ftp://x/")));
        assertTrue(e.getMessage().contains("kct.telemetry.endpoint"), e.getMessage());
    }
}
