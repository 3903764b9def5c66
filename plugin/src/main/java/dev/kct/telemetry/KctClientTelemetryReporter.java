package dev.kct.telemetry;

import org.apache.kafka.server.telemetry.ClientTelemetry;
import org.apache.kafka.server.telemetry.ClientTelemetryReceiver;

/**
 * Broker plugin for Kafka 3.7 up to 4.x: a {@code MetricsReporter} implementing KIP-714's
 * {@link ClientTelemetry}. Configure it with
 * {@code metric.reporters=dev.kct.telemetry.KctClientTelemetryReporter}.
 *
 * <p>{@code ClientTelemetry} is deprecated since Kafka 4.2 (and due to go in 5.0); on 4.2+ prefer
 * {@link KctClientTelemetryExporterReporter}, which also forwards the push interval.
 */
@SuppressWarnings("removal")
public class KctClientTelemetryReporter extends AbstractForwardingReporter implements ClientTelemetry {

    @Override
    public ClientTelemetryReceiver clientReceiver() {
        Forwarder target = forwarder();
        return (context, payload) -> export(target, context, payload, -1);
    }
}
