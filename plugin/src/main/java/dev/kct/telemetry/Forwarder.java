package dev.kct.telemetry;

import java.io.IOException;
import java.io.InputStream;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.FileTime;
import java.security.GeneralSecurityException;
import java.security.KeyStore;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.security.cert.X509Certificate;
import java.time.Instant;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLEngine;
import javax.net.ssl.TrustManager;
import javax.net.ssl.TrustManagerFactory;
import javax.net.ssl.X509ExtendedTrustManager;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The core shared by both broker-facing classes: a bounded queue that the broker's request thread
 * only ever {@link #offer}s to (never blocks: when the queue is full the push is dropped and counted),
 * and sender threads that POST each push to the OTLP/HTTP endpoint over a keep-alive HTTP/1.1
 * connection, retrying with exponential backoff and honouring {@code Retry-After} on 429/503.
 */
public final class Forwarder implements AutoCloseable {

    private static final Logger LOG = LoggerFactory.getLogger(Forwarder.class);
    private static final long WARN_EVERY_NANOS = TimeUnit.SECONDS.toNanos(30);
    static final String USER_AGENT = "kct-telemetry-plugin/"
        + (Forwarder.class.getPackage().getImplementationVersion() == null
            ? "dev" : Forwarder.class.getPackage().getImplementationVersion());

    /** One push waiting to be sent: OTLP bytes plus the label headers computed on the request thread. */
    record Push(byte[] body, Map<String, String> headers) {
    }

    private final ForwarderConfig config;
    private final BlockingQueue<Push> queue;
    private final AtomicLong queuedBytes = new AtomicLong();
    private final ForwarderMetrics metrics;
    private final RetryPolicy retryPolicy;
    private final HttpClient http;
    private final List<Thread> senders = new CopyOnWriteArrayList<>();
    private final AtomicLong lastWarnNanos = new AtomicLong(System.nanoTime() - WARN_EVERY_NANOS);
    private volatile URI endpoint;
    private volatile TokenSource token;
    private volatile boolean running = true;
    private volatile long drainDeadlineNanos = Long.MAX_VALUE;

    public Forwarder(ForwarderConfig config, Map<String, String> metricTags) {
        this.config = config;
        this.queue = new ArrayBlockingQueue<>(config.queueCapacity);
        this.metrics = new ForwarderMetrics(config.jmxPrefix, metricTags, queue::size, queuedBytes::get);
        this.retryPolicy = new RetryPolicy(config.retryBackoffMs, config.retryBackoffMaxMs);
        this.endpoint = config.endpoint;
        this.token = config.tokenFile == null ? null : new TokenSource(config.tokenFile);
        HttpClient.Builder builder = HttpClient.newBuilder()
            .version(HttpClient.Version.HTTP_1_1)
            .connectTimeout(config.connectTimeout)
            .followRedirects(HttpClient.Redirect.NEVER);
        SSLContext ssl = sslContext(config);
        if (ssl != null) {
            builder.sslContext(ssl);
        }
        this.http = builder.build();
        for (int i = 0; i < config.senderThreads; i++) {
            Thread t = new Thread(this::sendLoop, "kct-telemetry-sender-" + i);
            t.setDaemon(true);
            senders.add(t);
            t.start();
        }
        LOG.info("kct telemetry forwarder started: endpoint={} queue.capacity={} sender.threads={}",
            endpoint, config.queueCapacity, config.senderThreads);
    }

    /**
     * Enqueue one push without blocking. The payload bytes are copied (the broker may reuse its buffer
     * once the call returns). Returns false when the push was dropped (queue full, or shutting down).
     */
    public boolean offer(Map<String, String> headers, ByteBuffer data) {
        if (running && queue.remainingCapacity() == 0) {
            drop("queue full (" + config.queueCapacity + " pushes)");
            return false;
        }
        ByteBuffer view = data == null ? ByteBuffer.allocate(0) : data.duplicate();
        byte[] body = new byte[view.remaining()];
        view.get(body);
        if (!running || queuedBytes.addAndGet(body.length) > config.queueMaxBytes) {
            queuedBytes.addAndGet(-body.length);
            drop("queue full (" + config.queueMaxBytes + " bytes) or shutting down");
            return false;
        }
        if (!queue.offer(new Push(body, headers))) {
            queuedBytes.addAndGet(-body.length);
            drop("queue full (" + config.queueCapacity + " pushes)");
            return false;
        }
        return true;
    }

    private void drop(String why) {
        metrics.recordDropped();
        warn("dropping client telemetry push: {}", why);
    }

    /** Switch endpoint and token file at run time (dynamic broker config); in-flight pushes finish. */
    public void reconfigure(URI newEndpoint, Path tokenFile) {
        endpoint = newEndpoint;
        token = tokenFile == null ? null : new TokenSource(tokenFile);
        LOG.info("kct telemetry forwarder reconfigured: endpoint={}", newEndpoint);
    }

    public ForwarderMetrics metrics() {
        return metrics;
    }

    public URI endpoint() {
        return endpoint;
    }

    private void sendLoop() {
        while (running || (!queue.isEmpty() && System.nanoTime() < drainDeadlineNanos)) {
            Push push;
            try {
                push = queue.poll(100, TimeUnit.MILLISECONDS);
            } catch (InterruptedException e) {
                return;
            }
            if (push == null) {
                continue;
            }
            queuedBytes.addAndGet(-push.body.length);
            try {
                send(push);
            } catch (RuntimeException e) {
                metrics.recordFailed();
                warn("client telemetry push failed unexpectedly: {}", e.toString());
            }
            if (Thread.currentThread().isInterrupted()) {
                return;
            }
        }
    }

    private void send(Push push) {
        for (int attempt = 0; ; attempt++) {
            URI target = endpoint;
            HttpRequest request = request(target, push);
            int status;
            String retryAfter = null;
            String problem;
            long started = System.nanoTime();
            try {
                HttpResponse<Void> response = http.send(request, HttpResponse.BodyHandlers.discarding());
                status = response.statusCode();
                if (status >= 200 && status < 300) {
                    metrics.recordForwarded(push.body.length, (System.nanoTime() - started) / 1e6);
                    return;
                }
                retryAfter = response.headers().firstValue("retry-after").orElse(null);
                problem = "HTTP " + status;
                if (!RetryPolicy.retryable(status)) {
                    fail(target, problem + " (not retryable)");
                    return;
                }
            } catch (IOException e) {
                status = -1;
                problem = e.getClass().getSimpleName() + (e.getMessage() == null ? "" : ": " + e.getMessage());
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                fail(target, "interrupted at shutdown");
                return;
            }
            if (attempt >= config.retriesMax) {
                fail(target, problem + " after " + (attempt + 1) + " attempts");
                return;
            }
            long delayMs = retryPolicy.delayMs(attempt + 1, status,
                java.util.Optional.ofNullable(retryAfter), Instant.now());
            if (!running && System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(delayMs) > drainDeadlineNanos) {
                fail(target, problem + "; no time left to retry before shutdown");
                return;
            }
            metrics.recordRetry();
            try {
                Thread.sleep(delayMs);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                fail(target, "interrupted at shutdown");
                return;
            }
        }
    }

    private void fail(URI target, String why) {
        metrics.recordFailed();
        warn("client telemetry push to " + target + " failed: {}", why);
    }

    private HttpRequest request(URI target, Push push) {
        HttpRequest.Builder b = HttpRequest.newBuilder(target)
            .timeout(config.requestTimeout)
            .header("Content-Type", "application/x-protobuf")
            .header("User-Agent", USER_AGENT)
            .POST(HttpRequest.BodyPublishers.ofByteArray(push.body));
        for (Map.Entry<String, String> h : push.headers.entrySet()) {
            b.header(h.getKey(), h.getValue());
        }
        TokenSource t = token;
        if (t != null) {
            String bearer = t.get();
            if (bearer != null) {
                b.header("Authorization", "Bearer " + bearer);
            }
        }
        return b.build();
    }

    /** Log at most one warning every 30 s: a dead endpoint must not flood the broker's log. */
    private void warn(String format, Object arg) {
        long now = System.nanoTime();
        long last = lastWarnNanos.get();
        if (now - last >= WARN_EVERY_NANOS && lastWarnNanos.compareAndSet(last, now)) {
            LOG.warn(format + " (further warnings suppressed for 30s; see JMX " + config.jmxPrefix + ")", arg);
        }
    }

    /**
     * Stop taking pushes, give the senders up to close.timeout.ms to drain the queue, then stop them;
     * whatever is still queued is counted as dropped.
     */
    @Override
    public void close() {
        drainDeadlineNanos = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(config.closeTimeoutMs);
        running = false;
        for (Thread t : senders) {
            long left = TimeUnit.NANOSECONDS.toMillis(drainDeadlineNanos - System.nanoTime());
            try {
                t.join(Math.max(1, left));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                break;
            }
        }
        for (Thread t : senders) {
            t.interrupt();
        }
        Push left;
        while ((left = queue.poll()) != null) {
            queuedBytes.addAndGet(-left.body.length);
            metrics.recordDropped();
        }
        metrics.close();
    }

    /** Bearer token read from a file (e.g. a mounted Kubernetes Secret), re-read when the file changes. */
    static final class TokenSource {
        private final Path path;
        private volatile FileTime seen;
        private volatile String value;

        TokenSource(Path path) {
            this.path = path;
        }

        String get() {
            try {
                FileTime modified = Files.getLastModifiedTime(path);
                if (!modified.equals(seen)) {
                    value = Files.readString(path, StandardCharsets.UTF_8).trim();
                    seen = modified;
                }
            } catch (IOException e) {
                LOG.debug("cannot read token file {}: {}", path, e.toString());
            }
            return value == null || value.isEmpty() ? null : value;
        }
    }

    static SSLContext sslContext(ForwarderConfig config) {
        try {
            if (config.tlsInsecureSkipVerify) {
                SSLContext ctx = SSLContext.getInstance("TLS");
                ctx.init(null, new TrustManager[] {new TrustAll()}, null);
                LOG.warn("{} is true: the endpoint's certificate is NOT verified",
                    ForwarderConfig.TLS_INSECURE_SKIP_VERIFY);
                return ctx;
            }
            KeyStore trust = null;
            if (config.tlsCaFile != null) {
                trust = KeyStore.getInstance(KeyStore.getDefaultType());
                trust.load(null, null);
                try (InputStream in = Files.newInputStream(config.tlsCaFile)) {
                    int i = 0;
                    for (Certificate cert : CertificateFactory.getInstance("X.509").generateCertificates(in)) {
                        trust.setCertificateEntry("ca-" + i++, cert);
                    }
                }
            } else if (config.tlsTruststorePath != null) {
                trust = KeyStore.getInstance(config.tlsTruststoreType);
                try (InputStream in = Files.newInputStream(config.tlsTruststorePath)) {
                    trust.load(in, config.tlsTruststorePassword.toCharArray());
                }
            }
            if (trust == null) {
                return null;
            }
            TrustManagerFactory tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
            tmf.init(trust);
            SSLContext ctx = SSLContext.getInstance("TLS");
            ctx.init(null, tmf.getTrustManagers(), null);
            return ctx;
        } catch (IOException | GeneralSecurityException e) {
            throw new org.apache.kafka.common.config.ConfigException(
                "kct telemetry TLS trust material cannot be loaded: " + e);
        }
    }

    /** Accepts any certificate and host name: only for tls.insecure.skip.verify=true. */
    private static final class TrustAll extends X509ExtendedTrustManager {
        @Override
        public void checkClientTrusted(X509Certificate[] chain, String authType, java.net.Socket socket) {
        }

        @Override
        public void checkServerTrusted(X509Certificate[] chain, String authType, java.net.Socket socket) {
        }

        @Override
        public void checkClientTrusted(X509Certificate[] chain, String authType, SSLEngine engine) {
        }

        @Override
        public void checkServerTrusted(X509Certificate[] chain, String authType, SSLEngine engine) {
        }

        @Override
        public void checkClientTrusted(X509Certificate[] chain, String authType) {
        }

        @Override
        public void checkServerTrusted(X509Certificate[] chain, String authType) {
        }

        @Override
        public X509Certificate[] getAcceptedIssuers() {
            return new X509Certificate[0];
        }
    }
}
