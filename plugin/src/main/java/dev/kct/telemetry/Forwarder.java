package dev.kct.telemetry;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.FileTime;
import java.time.Instant;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLParameters;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The core shared by both broker-facing classes: a {@link PushQueue} that the broker's request thread
 * only ever {@link #offer}s to (never blocks: when full, older pushes make room and are counted), and
 * sender threads that POST each push to the OTLP/HTTP endpoint over keep-alive HTTP/1.1 connections.
 *
 * <p>A sender never sleeps on one push: a push that cannot be delivered now goes back to the queue. 429
 * paces only that client (its newest push wins); an unavailable endpoint (connection error, timeout,
 * 408/502/503/504) pauses the whole queue with backoff, {@code Retry-After} honoured; 401 makes the
 * sender re-read the token file and try once more at once if the token changed, and otherwise pause the
 * queue without spending the push's retries (a rotation in progress; the queue's max age bounds it).
 */
public final class Forwarder implements AutoCloseable {

    private static final Logger LOG = LoggerFactory.getLogger(Forwarder.class);
    private static final long WARN_EVERY_NANOS = TimeUnit.SECONDS.toNanos(30);
    private static final long TAKE_WAIT_NANOS = TimeUnit.MILLISECONDS.toNanos(100);
    static final String USER_AGENT = "kct-telemetry-plugin/"
        + (Forwarder.class.getPackage().getImplementationVersion() == null
            ? "dev" : Forwarder.class.getPackage().getImplementationVersion());

    /** One push waiting to be sent: OTLP bytes plus the label headers computed on the request thread. */
    record Push(byte[] body, Map<String, String> headers) {
    }

    private final ForwarderConfig config;
    private final PushQueue queue;
    private final ForwarderMetrics metrics;
    private final RetryPolicy retryPolicy;
    private final TlsContextSource tls;
    private volatile Client client;
    private final List<Thread> senders = new CopyOnWriteArrayList<>();
    private final AtomicLong lastWarnNanos = new AtomicLong(System.nanoTime() - WARN_EVERY_NANOS);
    private volatile URI endpoint;
    private volatile TokenSource token;
    private volatile boolean running = true;
    private volatile long drainDeadlineNanos = Long.MAX_VALUE;

    public Forwarder(ForwarderConfig config, Map<String, String> metricTags) {
        this.config = config;
        this.queue = new PushQueue(config.queueCapacity, config.queueMaxBytes, config.queueMaxAgeMs,
            this::dropped, System::nanoTime);
        this.metrics = new ForwarderMetrics(config.jmxPrefix, metricTags, queue::size, queue::bytes,
            queue::clientsWaiting, queue::endpointPaused);
        this.retryPolicy = new RetryPolicy(config.retryBackoffMs, config.retryBackoffMaxMs);
        this.endpoint = config.endpoint;
        this.token = config.tokenFile == null ? null : new TokenSource(config.tokenFile);
        this.tls = new TlsContextSource(config, metrics::recordTlsReload, metrics::recordTlsReloadError);
        for (int i = 0; i < config.senderThreads; i++) {
            Thread t = new Thread(this::sendLoop, "kct-telemetry-sender-" + i);
            t.setDaemon(true);
            senders.add(t);
            t.start();
        }
        LOG.info("kct telemetry forwarder started: endpoint={} queue.capacity={} queue.max.age.ms={} "
            + "sender.threads={}", endpoint, config.queueCapacity, config.queueMaxAgeMs, config.senderThreads);
    }

    /**
     * Enqueue one push without blocking. The payload bytes are copied (the broker may reuse its buffer
     * once the call returns). Returns false when this push was dropped (too large, or shutting down);
     * when the queue is full the oldest waiting push makes room instead (see {@link PushQueue}).
     */
    public boolean offer(Map<String, String> headers, ByteBuffer data) {
        ByteBuffer view = data == null ? ByteBuffer.allocate(0) : data.duplicate();
        byte[] body = new byte[view.remaining()];
        view.get(body);
        String client = headers.getOrDefault(PushLabels.H_CLIENT_INSTANCE_ID, "");
        return queue.offer(client, new Push(body, headers));
    }

    private void dropped(PushQueue.DropReason reason, PushQueue.Item item) {
        metrics.recordDropped(reason);
        if (reason == PushQueue.DropReason.QUEUE_FULL) {
            warn("dropping client telemetry push: {}", "queue full (" + config.queueCapacity + " pushes or "
                + config.queueMaxBytes + " bytes); the oldest waiting pushes make room");
        } else if (reason == PushQueue.DropReason.EXPIRED) {
            warn("dropping client telemetry push: {}", "older than " + ForwarderConfig.QUEUE_MAX_AGE_MS + "="
                + config.queueMaxAgeMs);
        }
    }

    /** Switch endpoint and token file at run time (dynamic broker config); in-flight pushes finish. */
    public void reconfigure(URI newEndpoint, Path tokenFile) {
        boolean moved = !newEndpoint.equals(endpoint);
        endpoint = newEndpoint;
        token = tokenFile == null ? null : new TokenSource(tokenFile);
        if (moved) {
            queue.endpointChanged();  // do not hold pushes for the new endpoint because the old one was down
        }
        LOG.info("kct telemetry forwarder reconfigured: endpoint={}", newEndpoint);
    }

    public ForwarderMetrics metrics() {
        return metrics;
    }

    public URI endpoint() {
        return endpoint;
    }

    private void sendLoop() {
        while (running || (queue.size() > 0 && System.nanoTime() - drainDeadlineNanos < 0)) {
            PushQueue.Item item;
            try {
                item = queue.take(TAKE_WAIT_NANOS);
            } catch (InterruptedException e) {
                return;
            }
            if (item == null) {
                continue;
            }
            try {
                send(item);
            } catch (RuntimeException e) {
                if (item.inFlight) {  // not settled yet (read without the lock: only this thread settles it)
                    queue.failed(item);
                }
                metrics.recordFailed();
                warn("client telemetry push failed unexpectedly: {}", e.toString());
            }
            if (Thread.currentThread().isInterrupted()) {
                return;
            }
        }
    }

    /** One attempt (two when a 401 made us pick up a changed token); the item is always settled. */
    private void send(PushQueue.Item item) {
        while (true) {
            URI target = endpoint;
            TokenSource tokenSource = token;
            int status;
            String retryAfter = null;
            String problem;
            long started = System.nanoTime();
            try {
                HttpResponse<Void> response = httpClient().send(request(target, item.push, tokenSource),
                    HttpResponse.BodyHandlers.discarding());
                status = response.statusCode();
                if (status >= 200 && status < 300) {
                    metrics.recordForwarded(item.size(), (System.nanoTime() - started) / 1e6);
                    queue.delivered(item);
                    return;
                }
                retryAfter = response.headers().firstValue("retry-after").orElse(null);
                problem = "HTTP " + status;
            } catch (IOException e) {
                status = -1;
                problem = e.getClass().getSimpleName() + (e.getMessage() == null ? "" : ": " + e.getMessage());
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                queue.failed(item);
                fail(target, "interrupted at shutdown");
                return;
            }
            if (status == 401 && tokenSource != null && !item.tokenReloaded) {
                item.tokenReloaded = true;
                metrics.recordTokenReload();
                if (tokenSource.reload()) {
                    continue;  // a rotated token: try it at once
                }
            }
            if (status != -1 && status != 401 && !RetryPolicy.retryable(status)) {
                queue.failed(item);
                fail(target, problem + " (not retryable)");
                return;
            }
            // A 401 while we read a token file is a rotation not yet seen on both sides (the endpoint or our
            // file lags): the push is not at fault, so it waits without using its retries; queue.max.age.ms
            // bounds the wait, as for any paused queue.
            boolean awaitingRotation = status == 401 && tokenSource != null;
            if (!awaitingRotation) {
                item.attempts++;
            }
            Optional<String> asked = Optional.ofNullable(retryAfter);
            if (status == 429) {
                metrics.recordRateLimited();
                long delayMs = retryPolicy.delayMs(queue.rateLimitedCount(item) + 1, status, asked, Instant.now());
                boolean again = item.attempts <= config.retriesMax;
                queue.rateLimited(item, TimeUnit.MILLISECONDS.toNanos(delayMs), again);
                if (again) {
                    metrics.recordRetry();
                } else {
                    fail(target, problem + " after " + item.attempts + " attempts");
                }
                return;
            }
            // the endpoint as a whole is unavailable (or refuses our token): pause everything, one probe after
            metrics.recordEndpointUnavailable();
            int failures = queue.endpointFailed();
            long delayMs = retryPolicy.delayMs(failures, status, asked, Instant.now());
            queue.pause(TimeUnit.MILLISECONDS.toNanos(delayMs));
            if (item.attempts > config.retriesMax) {
                queue.failed(item);
                fail(target, problem + " after " + item.attempts + " attempts");
            } else {
                metrics.recordRetry();
                queue.retry(item);
                warn("client telemetry endpoint " + target + " unavailable, pausing: {}", problem);
            }
            return;
        }
    }

    /** An HTTP client built on one generation of TLS material: a new one when the material changed. */
    private record Client(long generation, HttpClient http) {
    }

    /** Raised instead of a send while no TLS material could be loaded: handled as an unreachable endpoint. */
    static final class TlsMaterialUnavailableException extends IOException {
        private static final long serialVersionUID = 1L;

        TlsMaterialUnavailableException(String message) {
            super(message);
        }
    }

    /**
     * The HTTP client for this send. When the TLS files changed, a new client (new connections, new
     * handshakes) replaces the old one, whose in-flight requests finish and whose idle connections go
     * with it.
     */
    private HttpClient httpClient() throws TlsMaterialUnavailableException {
        TlsContextSource.Material material = tls.current();
        if (material == null) {
            throw new TlsMaterialUnavailableException(tls.problem());
        }
        Client current = client;
        if (current != null && current.generation() == material.generation()) {
            return current.http();
        }
        synchronized (this) {
            if (client == null || client.generation() != material.generation()) {
                client = new Client(material.generation(), newHttpClient(material.context()));
            }
            return client.http();
        }
    }

    private HttpClient newHttpClient(SSLContext context) {
        SSLParameters parameters = context.getDefaultSSLParameters();
        parameters.setProtocols(config.tlsProtocols.toArray(new String[0]));
        if (!config.tlsCipherSuites.isEmpty()) {
            parameters.setCipherSuites(config.tlsCipherSuites.toArray(new String[0]));
        }
        return HttpClient.newBuilder()
            .version(HttpClient.Version.HTTP_1_1)
            .connectTimeout(config.connectTimeout)
            .followRedirects(HttpClient.Redirect.NEVER)
            .sslContext(context)
            .sslParameters(parameters)
            .build();
    }

    private void fail(URI target, String why) {
        metrics.recordFailed();
        warn("client telemetry push to " + target + " failed: {}", why);
    }

    private HttpRequest request(URI target, Push push, TokenSource tokenSource) {
        HttpRequest.Builder b = HttpRequest.newBuilder(target)
            .timeout(config.requestTimeout)
            .header("Content-Type", "application/x-protobuf")
            .header("User-Agent", USER_AGENT)
            .POST(HttpRequest.BodyPublishers.ofByteArray(push.body()));
        for (Map.Entry<String, String> h : push.headers().entrySet()) {
            b.header(h.getKey(), h.getValue());
        }
        if (tokenSource != null) {
            String bearer = tokenSource.get();
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
     * whatever is still queued is counted as dropped (shutdown).
     */
    @Override
    public void close() {
        drainDeadlineNanos = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(config.closeTimeoutMs);
        running = false;
        queue.close();
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
        for (int i = queue.drain().size(); i > 0; i--) {
            metrics.recordDropped(PushQueue.DropReason.SHUTDOWN);
        }
        // The counters go with the broker's JVM: the log keeps what a stopping broker forwarded and dropped.
        LOG.info("kct telemetry forwarder closed: forwarded={} dropped={} dropped-shutdown={} failed={}",
            (long) metrics.value("forwarded-total"), (long) metrics.value("dropped-total"),
            (long) metrics.value("dropped-shutdown-total"), (long) metrics.value("failed-total"));
        metrics.close();
    }

    /**
     * Bearer token read from a file (e.g. a mounted Kubernetes Secret): re-read when the file's
     * modification time changes, at least every {@link #REREAD_EVERY_NANOS} regardless (a rewrite within
     * the file system's time resolution keeps the mtime), and at once on {@link #reload} (after a 401).
     */
    static final class TokenSource {
        static final long REREAD_EVERY_NANOS = TimeUnit.SECONDS.toNanos(60);
        private final Path path;
        private volatile FileTime seen;
        private volatile long readAtNanos;
        private volatile String value;

        TokenSource(Path path) {
            this.path = path;
        }

        String get() {
            try {
                FileTime modified = Files.getLastModifiedTime(path);
                if (!modified.equals(seen) || System.nanoTime() - readAtNanos > REREAD_EVERY_NANOS) {
                    read(modified);
                }
            } catch (IOException e) {
                LOG.debug("cannot read token file {}: {}", path, e.toString());
            }
            return current();
        }

        /** Read the file now; true when the token differs from the one sent before. */
        synchronized boolean reload() {
            String before = current();
            try {
                read(Files.getLastModifiedTime(path));
            } catch (IOException e) {
                LOG.debug("cannot read token file {}: {}", path, e.toString());
            }
            String after = current();
            return after != null && !after.equals(before);
        }

        private synchronized void read(FileTime modified) throws IOException {
            value = Files.readString(path, StandardCharsets.UTF_8).trim();
            seen = modified;
            readAtNanos = System.nanoTime();
        }

        private String current() {
            String v = value;
            return v == null || v.isEmpty() ? null : v;
        }
    }
}
