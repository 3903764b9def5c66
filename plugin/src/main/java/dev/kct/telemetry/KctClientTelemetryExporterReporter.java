package dev.kct.telemetry;

import org.apache.kafka.server.telemetry.ClientTelemetryExporter;
import org.apache.kafka.server.telemetry.ClientTelemetryExporterProvider;

/**
 * Broker plugin for Kafka 4.2 and later: a {@code MetricsReporter} implementing KIP-1217's
 * {@link ClientTelemetryExporterProvider}, whose context also carries the subscription's push
 * interval (forwarded as {@code kct-push-interval-ms}). Configure it with
 * {@code metric.reporters=dev.kct.telemetry.KctClientTelemetryExporterReporter}.
 *
 * <p>Kept apart from {@link KctClientTelemetryReporter} so that a pre-4.2 broker never loads a class
 * referring to interfaces it lacks, and this one never refers to the deprecated {@code ClientTelemetry}.
 */
public class KctClientTelemetryExporterReporter extends AbstractForwardingReporter
    implements ClientTelemetryExporterProvider {

    @Override
    public ClientTelemetryExporter clientTelemetryExporter() {
        Forwarder target = forwarder();
        return (context, payload) -> export(target, context.authorizableRequestContext(), payload,
            context.pushIntervalMs());
    }
}
