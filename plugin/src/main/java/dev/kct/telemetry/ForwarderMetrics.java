package dev.kct.telemetry;

import java.util.EnumMap;
import java.util.List;
import java.util.Map;
import java.util.function.LongSupplier;

import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.metrics.JmxReporter;
import org.apache.kafka.common.metrics.KafkaMetric;
import org.apache.kafka.common.metrics.KafkaMetricsContext;
import org.apache.kafka.common.metrics.MetricConfig;
import org.apache.kafka.common.metrics.Metrics;
import org.apache.kafka.common.metrics.MetricsReporter;
import org.apache.kafka.common.metrics.Sensor;
import org.apache.kafka.common.metrics.stats.Avg;
import org.apache.kafka.common.metrics.stats.CumulativeSum;
import org.apache.kafka.common.metrics.stats.Max;
import org.apache.kafka.common.metrics.stats.Meter;
import org.apache.kafka.common.utils.Time;

/**
 * The forwarder's own metrics, as Kafka metrics.
 *
 * <p>A {@code MetricsReporter} is handed the broker's metrics but never the broker's {@link Metrics}
 * registry, so it cannot add metrics there. The forwarder therefore keeps its own registry with a
 * {@link JmxReporter} under the JMX domain {@code kct.telemetry} (configurable), group
 * {@code client-telemetry-forwarder}: JMX exporters (Prometheus JMX exporter, jconsole, Strimzi's
 * metrics config) see them like any broker metric.
 */
public final class ForwarderMetrics implements AutoCloseable {

    public static final String GROUP = "client-telemetry-forwarder";

    private final Metrics metrics;
    private final Sensor forwarded;
    private final Sensor forwardedBytes;
    private final Sensor dropped;
    private final Map<PushQueue.DropReason, Sensor> droppedBy = new EnumMap<>(PushQueue.DropReason.class);
    private final Sensor failed;
    private final Sensor rateLimited;
    private final Sensor endpointUnavailable;
    private final Sensor tokenReloads;
    private final Sensor tlsReloads;
    private final Sensor tlsReloadErrors;
    private final Sensor retries;
    private final Sensor sendLatency;

    public ForwarderMetrics(String jmxPrefix, Map<String, String> tags, LongSupplier queueDepth,
                            LongSupplier queueBytes, LongSupplier queueClients, LongSupplier endpointPaused) {
        List<MetricsReporter> reporters = List.of(new JmxReporter());
        metrics = new Metrics(new MetricConfig().tags(tags), reporters, Time.SYSTEM,
            new KafkaMetricsContext(jmxPrefix));
        forwarded = meter("forwarded", "pushes delivered to the endpoint (2xx)");
        forwardedBytes = meter("forwarded-bytes", "payload bytes delivered to the endpoint");
        dropped = meter("dropped", "pushes dropped unsent (queue full, too old, superseded, shutdown)");
        for (PushQueue.DropReason reason : PushQueue.DropReason.values()) {
            Sensor s = metrics.sensor("dropped-" + reason.metric, dropped);
            s.add(name("dropped-" + reason.metric + "-total", "pushes dropped: " + reason.metric),
                new CumulativeSum());
            droppedBy.put(reason, s);
        }
        failed = meter("failed", "pushes given up after retries or refused by the endpoint");
        retries = counter("retries", "attempts that failed and were queued to be tried again");
        rateLimited = counter("rate-limited", "answers 429: the client is paced, its newest push wins");
        endpointUnavailable = counter("endpoint-unavailable",
            "attempts that found the endpoint unavailable (connection error, timeout, 401, 408, 5xx): queue paused");
        tokenReloads = counter("token-reloads", "times a 401 made the plugin re-read its token file");
        tlsReloads = counter("tls-reloads",
            "times changed TLS files (CA, truststore, client certificate, key, keystore) were loaded");
        tlsReloadErrors = counter("tls-reload-errors",
            "times changed TLS files could not be loaded: the previous material was kept");
        sendLatency = metrics.sensor("send-latency");
        sendLatency.add(name("send-latency-avg", "average ms of a successful POST"), new Avg());
        sendLatency.add(name("send-latency-max", "max ms of a successful POST"), new Max());
        metrics.addMetric(name("queue-depth", "pushes waiting to be sent"),
            (config, now) -> queueDepth.getAsLong());
        metrics.addMetric(name("queue-bytes", "payload bytes waiting or in flight"),
            (config, now) -> queueBytes.getAsLong());
        metrics.addMetric(name("queue-clients", "client instances with pushes waiting"),
            (config, now) -> queueClients.getAsLong());
        metrics.addMetric(name("endpoint-paused", "1 while the endpoint is considered unavailable, else 0"),
            (config, now) -> endpointPaused.getAsLong());
    }

    private Sensor counter(String what, String description) {
        Sensor sensor = metrics.sensor(what);
        sensor.add(name(what + "-total", description), new CumulativeSum());
        return sensor;
    }

    private MetricName name(String name, String description) {
        return metrics.metricName(name, GROUP, description);
    }

    private Sensor meter(String what, String description) {
        Sensor sensor = metrics.sensor(what);
        sensor.add(new Meter(name(what + "-rate", description + " per second"),
            name(what + "-total", description)));
        return sensor;
    }

    void recordForwarded(int bytes, double latencyMs) {
        forwarded.record();
        forwardedBytes.record(bytes);
        sendLatency.record(latencyMs);
    }

    /** Records on the reason's counter and, through it, on dropped-total/-rate. */
    void recordDropped(PushQueue.DropReason reason) {
        droppedBy.get(reason).record();
    }

    void recordFailed() {
        failed.record();
    }

    void recordRetry() {
        retries.record();
    }

    void recordRateLimited() {
        rateLimited.record();
    }

    void recordEndpointUnavailable() {
        endpointUnavailable.record();
    }

    void recordTokenReload() {
        tokenReloads.record();
    }

    void recordTlsReload() {
        tlsReloads.record();
    }

    void recordTlsReloadError() {
        tlsReloadErrors.record();
    }

    /** Current value of one of this forwarder's metrics by name (e.g. "dropped-total"); NaN if absent. */
    public double value(String name) {
        KafkaMetric metric = metrics.metric(metrics.metricName(name, GROUP));
        if (metric == null) {
            return Double.NaN;
        }
        Object value = metric.metricValue();
        return value instanceof Number n ? n.doubleValue() : Double.NaN;
    }

    @Override
    public void close() {
        metrics.close();
    }
}
