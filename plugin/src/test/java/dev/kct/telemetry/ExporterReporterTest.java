package dev.kct.telemetry;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Map;

import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.server.authorizer.AuthorizableRequestContext;
import org.apache.kafka.server.telemetry.ClientTelemetryContext;
import org.junit.jupiter.api.Test;

/** The 4.2+ class (KIP-1217's interfaces): compiled and run against the newest kafka-clients only. */
class ExporterReporterTest {

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
            reporter.clientTelemetryExporter().exportMetrics(context, ReporterTest.payload(Uuid.randomUuid(), true, new byte[] {1, 2}));
            // Then the endpoint gets it with interval, broker id, client id and the terminating flag
            assertTrue(Waits.until(() -> endpoint.received.size() == 1, Waits.EVENT_MS));
            Map<String, String> h = endpoint.received.get(0).headers();
            assertEquals("1000", h.get("kct-push-interval-ms"));
            assertEquals("3", h.get("kct-broker-id"));
            assertEquals("consumer-9", h.get("kct-client-id"));
            assertEquals("true", h.get("kct-terminating"));
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
