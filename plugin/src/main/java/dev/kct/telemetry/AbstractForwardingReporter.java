package dev.kct.telemetry;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.metrics.KafkaMetric;
import org.apache.kafka.common.metrics.MetricsContext;
import org.apache.kafka.common.metrics.MetricsReporter;
import org.apache.kafka.server.authorizer.AuthorizableRequestContext;
import org.apache.kafka.server.telemetry.ClientTelemetryPayload;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * What both broker-facing classes share: the {@link MetricsReporter} life cycle (Kafka loads the plugin
 * through {@code metric.reporters}), configuration, and turning one push into a queued HTTP request.
 *
 * <p>It touches only types that exist since Kafka 3.7 ({@link ClientTelemetryPayload},
 * {@link AuthorizableRequestContext}); the subclasses add the interface the broker looks for. The
 * forwarder (threads, HTTP client, JMX metrics) is created lazily when the broker first asks for a
 * receiver/exporter: in combined KRaft mode the controller also instantiates every metric reporter,
 * and that instance must stay idle.
 */
public abstract class AbstractForwardingReporter implements MetricsReporter {

    private static final Logger LOG = LoggerFactory.getLogger(AbstractForwardingReporter.class);

    private ForwarderConfig config = ForwarderConfig.parse(Map.of());
    private volatile String brokerId;
    private Forwarder forwarder;

    @Override
    public synchronized void configure(Map<String, ?> configs) {
        config = ForwarderConfig.parse(configs);
        Object id = configs.get("node.id");
        if (id == null) {
            id = configs.get("broker.id");
        }
        if (id != null && !id.toString().isBlank()) {
            brokerId = id.toString().trim();
        }
    }

    @Override
    public void contextChange(MetricsContext metricsContext) {
        if (brokerId == null) {
            Map<String, String> labels = metricsContext.contextLabels();
            String id = labels.getOrDefault("kafka.broker.id", labels.get("kafka.node.id"));
            if (id != null) {
                brokerId = id;
            }
        }
    }

    @Override
    public void init(List<KafkaMetric> metrics) {
    }

    @Override
    public void metricChange(KafkaMetric metric) {
    }

    @Override
    public void metricRemoval(KafkaMetric metric) {
    }

    /** The forwarder, started on first use (see the class comment). */
    protected final synchronized Forwarder forwarder() {
        if (forwarder == null) {
            Map<String, String> tags = new LinkedHashMap<>();
            if (brokerId != null) {
                tags.put("broker-id", brokerId);
            }
            forwarder = new Forwarder(config, tags);
        }
        return forwarder;
    }

    /**
     * Called on the broker's request thread: compute labels, copy the payload, enqueue. Never blocks,
     * never throws (an exception here would fail the client's PushTelemetry request).
     *
     * @param pushIntervalMs the subscription's push interval, or -1 when the API does not expose it
     */
    protected final void export(Forwarder target, AuthorizableRequestContext context,
                                ClientTelemetryPayload payload, int pushIntervalMs) {
        try {
            Map<String, String> headers = PushLabels.of(context, payload.clientInstanceId(),
                payload.isTerminating(), payload.contentType(), brokerId, pushIntervalMs);
            String encoding = PayloadEncoding.of(payload.data());
            if (encoding != null) {
                headers.put(PayloadEncoding.HEADER, encoding);
            }
            target.offer(headers, payload.data());
        } catch (RuntimeException | LinkageError e) {
            target.metrics().recordFailed();
            LOG.debug("cannot forward client telemetry push", e);
        }
    }

    @Override
    public Set<String> reconfigurableConfigs() {
        return ForwarderConfig.RECONFIGURABLE;
    }

    @Override
    public void validateReconfiguration(Map<String, ?> configs) throws ConfigException {
        ForwarderConfig.parse(configs);
    }

    @Override
    public synchronized void reconfigure(Map<String, ?> configs) {
        config = ForwarderConfig.parse(configs);
        if (forwarder != null) {
            forwarder.reconfigure(config.endpoint, config.tokenFile);
        }
    }

    @Override
    public synchronized void close() {
        if (forwarder != null) {
            forwarder.close();
            forwarder = null;
        }
    }
}
