package dev.kct.telemetry;

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
    private final Sensor failed;
    private final Sensor retries;
    private final Sensor sendLatency;

    public ForwarderMetrics(String jmxPrefix, Map<String, String> tags, LongSupplier queueDepth,
                            LongSupplier queueBytes) {
        List<MetricsReporter> reporters = List.of(new JmxReporter());
        metrics = new Metrics(new MetricConfig().tags(tags), reporters, Time.SYSTEM,
            new KafkaMetricsContext(jmxPrefix));
        forwarded = meter("forwarded", "pushes delivered to the endpoint (2xx)");
        forwardedBytes = meter("forwarded-bytes", "payload bytes delivered to the endpoint");
        dropped = meter("dropped", "pushes dropped because the queue was full (or at shutdown)");
        failed = meter("failed", "pushes given up after retries or refused by the endpoint");
        retries = metrics.sensor("retries");
        retries.add(name("retries-total", "HTTP attempts that were retried"), new CumulativeSum());
        sendLatency = metrics.sensor("send-latency");
        sendLatency.add(name("send-latency-avg", "average ms of a successful POST"), new Avg());
        sendLatency.add(name("send-latency-max", "max ms of a successful POST"), new Max());
        metrics.addMetric(name("queue-depth", "pushes waiting to be sent"),
            (config, now) -> queueDepth.getAsLong());
        metrics.addMetric(name("queue-bytes", "payload bytes waiting to be sent"),
            (config, now) -> queueBytes.getAsLong());
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

    void recordDropped() {
        dropped.record();
    }

    void recordFailed() {
        failed.record();
    }

    void recordRetry() {
        retries.record();
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
