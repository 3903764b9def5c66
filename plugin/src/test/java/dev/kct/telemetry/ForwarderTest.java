package dev.kct.telemetry;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.ServerSocket;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class ForwarderTest {

    private static Forwarder forwarder(String endpoint, Map<String, String> extra) {
        Map<String, Object> configs = new HashMap<>();
        configs.put(ForwarderConfig.ENDPOINT, endpoint);
        configs.put(ForwarderConfig.RETRY_BACKOFF_MS, "10");
        configs.put(ForwarderConfig.RETRY_BACKOFF_MAX_MS, "50");
        configs.put(ForwarderConfig.CLOSE_TIMEOUT_MS, "200");
        configs.put(ForwarderConfig.JMX_PREFIX, "kct.telemetry.test");
        configs.putAll(extra);
        return new Forwarder(ForwarderConfig.parse(configs), Map.of());
    }

    private static ByteBuffer payload(String text) {
        return ByteBuffer.wrap(text.getBytes(StandardCharsets.UTF_8));
    }

    @Test
    void forwardsBodyLabelsAndBearerToken(@TempDir Path dir) throws Exception {
        // Given an endpoint that accepts everything and a token file
        Path tokenFile = dir.resolve("token");
        Files.writeString(tokenFile, "s3cret\n");
        try (TestEndpoint endpoint = new TestEndpoint(n -> TestEndpoint.Answer.ok());
             Forwarder f = forwarder(endpoint.url(), Map.of(ForwarderConfig.TOKEN_FILE, tokenFile.toString()))) {
            // When one push is offered
            assertTrue(f.offer(Map.of("kct-client-id", "producer-1"), payload("otlp-bytes")));
            // Then it arrives as-is with the labels, the protobuf content type and the bearer token
            assertTrue(Waits.until(() -> f.metrics().value("forwarded-total") == 1.0, Waits.EVENT_MS));
            TestEndpoint.Received got = endpoint.received.get(0);
            assertArrayEquals("otlp-bytes".getBytes(StandardCharsets.UTF_8), got.body());
            assertEquals("application/x-protobuf", got.headers().get("content-type"));
            assertEquals("producer-1", got.headers().get("kct-client-id"));
            assertEquals("Bearer s3cret", got.headers().get("authorization"));
            assertTrue(f.metrics().value("send-latency-max") > 0.0);
            // and the forwarder's own metrics are visible over JMX under the configured prefix
            javax.management.MBeanServer jmx = java.lang.management.ManagementFactory.getPlatformMBeanServer();
            javax.management.ObjectName name =
                new javax.management.ObjectName("kct.telemetry.test:type=client-telemetry-forwarder");
            assertEquals(1.0, ((Number) jmx.getAttribute(name, "forwarded-total")).doubleValue());
        }
    }

    @Test
    void fullQueueKeepsTheNewestPushesAndNeverBlocks() throws Exception {
        // Given an endpoint that hangs until released, and a queue of two (the push in flight counts)
        CountDownLatch release = new CountDownLatch(1);
        try (TestEndpoint endpoint = new TestEndpoint(n -> {
            try {
                release.await(10, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            return TestEndpoint.Answer.ok();
        }); Forwarder f = forwarder(endpoint.url(), Map.of(ForwarderConfig.QUEUE_CAPACITY, "2",
                ForwarderConfig.SENDER_THREADS, "1"))) {
            assertTrue(f.offer(Map.of(), payload("first")));
            assertTrue(Waits.until(() -> endpoint.received.size() == 1, Waits.EVENT_MS), "sender is busy with 'first'");
            // When ten more pushes of the same client are offered
            long started = System.nanoTime();
            for (int i = 0; i < 10; i++) {
                assertTrue(f.offer(Map.of(), payload("push-" + i)));
            }
            long tookMs = (System.nanoTime() - started) / 1_000_000;
            // Then offering never waited, each new push made room by dropping an older one (counted),
            assertTrue(tookMs < 500, "offer must not block, took " + tookMs + " ms");
            assertEquals(9.0, f.metrics().value("dropped-total"));
            assertEquals(9.0, f.metrics().value("dropped-queue-full-total"));
            assertEquals(1.0, f.metrics().value("queue-depth"));
            // and the newest is the one delivered after the first
            release.countDown();
            assertTrue(Waits.until(() -> f.metrics().value("forwarded-total") == 2.0, Waits.EVENT_MS));
            assertEquals("push-9", new String(endpoint.received.get(1).body(), StandardCharsets.UTF_8));
            assertEquals(0.0, f.metrics().value("queue-depth"));
        }
    }

    @Test
    void endpointDownCountsFailuresAndNeverBlocks() throws Exception {
        // Given an endpoint address where nothing listens
        int port;
        try (ServerSocket s = new ServerSocket(0)) {
            port = s.getLocalPort();
        }
        try (Forwarder f = forwarder("http://127.0.0.1:" + port + "/v1/metrics",
                Map.of(ForwarderConfig.RETRIES_MAX, "2"))) {
            // When five pushes are offered
            long started = System.nanoTime();
            for (int i = 0; i < 5; i++) {
                assertTrue(f.offer(Map.of(), payload("push-" + i)));
            }
            long tookMs = (System.nanoTime() - started) / 1_000_000;
            // Then offering returned at once, each push is retried then counted as failed, none forwarded
            assertTrue(tookMs < 200, "offer must not block, took " + tookMs + " ms");
            assertTrue(Waits.until(() -> f.metrics().value("failed-total") == 5.0, Waits.EVENT_MS),
                "failed-total=" + f.metrics().value("failed-total"));
            assertEquals(10.0, f.metrics().value("retries-total"));
            assertEquals(0.0, f.metrics().value("forwarded-total"));
        }
    }

    @Test
    void retryAfterSecondsIsHonouredOn503() throws Exception {
        // Given an endpoint that first answers 503 with Retry-After: 1, then 200
        try (TestEndpoint endpoint = new TestEndpoint(n -> n == 0
                ? new TestEndpoint.Answer(503, Map.of("Retry-After", "1"))
                : TestEndpoint.Answer.ok());
             Forwarder f = forwarder(endpoint.url(), Map.of())) {
            // When one push is offered
            assertTrue(f.offer(Map.of(), payload("x")));
            // Then it is delivered on the second attempt, no sooner than one second after the first
            assertTrue(Waits.until(() -> f.metrics().value("forwarded-total") == 1.0, Waits.EVENT_MS));
            assertEquals(2, endpoint.received.size());
            long gapMs = (endpoint.received.get(1).nanos() - endpoint.received.get(0).nanos()) / 1_000_000;
            assertTrue(gapMs >= 950, "retried after " + gapMs + " ms, Retry-After asked 1000");
            assertEquals(1.0, f.metrics().value("retries-total"));
            assertEquals(0.0, f.metrics().value("failed-total"));
        }
    }

    @Test
    void retryAfterHttpDateIsHonouredOn429() throws Exception {
        // Given an endpoint that first answers 429 with a Retry-After date 2-3 s ahead, then 200
        String date = java.time.format.DateTimeFormatter.RFC_1123_DATE_TIME.format(
            java.time.ZonedDateTime.now(java.time.ZoneOffset.UTC).plusSeconds(3));
        try (TestEndpoint endpoint = new TestEndpoint(n -> n == 0
                ? new TestEndpoint.Answer(429, Map.of("Retry-After", date))
                : TestEndpoint.Answer.ok());
             Forwarder f = forwarder(endpoint.url(), Map.of())) {
            assertTrue(f.offer(Map.of(), payload("x")));
            // Then the retry waits for that date (HTTP-dates have 1 s resolution, so at least ~1 s)
            assertTrue(Waits.until(() -> f.metrics().value("forwarded-total") == 1.0, Waits.EVENT_MS));
            long gapMs = (endpoint.received.get(1).nanos() - endpoint.received.get(0).nanos()) / 1_000_000;
            assertTrue(gapMs >= 1_000, "retried after " + gapMs + " ms");
        }
    }

    private static Map<String, String> client(String instanceId) {
        return Map.of(PushLabels.H_CLIENT_INSTANCE_ID, instanceId);
    }

    private static String body(TestEndpoint.Received r) {
        return new String(r.body(), StandardCharsets.UTF_8);
    }

    @Test
    void aBackloggedClientDoesNotDelayAnotherClientsPush() throws Exception {
        // Given one sender busy with client a's push, and a backlog of 200 more pushes of a
        CountDownLatch release = new CountDownLatch(1);
        try (TestEndpoint endpoint = new TestEndpoint(n -> {
            if (n == 0) {
                try {
                    release.await(10, TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
            return TestEndpoint.Answer.ok();
        }); Forwarder f = forwarder(endpoint.url(), Map.of(ForwarderConfig.SENDER_THREADS, "1"))) {
            assertTrue(f.offer(client("a"), payload("a-first")));
            assertTrue(Waits.until(() -> endpoint.received.size() == 1, Waits.EVENT_MS));
            for (int i = 0; i < 200; i++) {
                f.offer(client("a"), payload("a-" + i));
            }
            // When client b pushes once and the endpoint answers again
            f.offer(client("b"), payload("b-0"));
            release.countDown();
            // Then b's push is the next one sent, ahead of a's backlog, and a's newest follows
            assertTrue(Waits.until(() -> f.metrics().value("forwarded-total") == 202.0, Waits.EVENT_MS));
            assertEquals("b-0", body(endpoint.received.get(1)));
            assertEquals("a-199", body(endpoint.received.get(2)));
        }
    }

    @Test
    void pushesOlderThanMaxAgeAreDroppedWhileTheEndpointIsDown() throws Exception {
        // Given an endpoint that answers 503 (Retry-After: 1) to its first request, and max age 300 ms
        try (TestEndpoint endpoint = new TestEndpoint(n -> n == 0
                ? new TestEndpoint.Answer(503, Map.of("Retry-After", "1"))
                : TestEndpoint.Answer.ok());
             Forwarder f = forwarder(endpoint.url(), Map.of(ForwarderConfig.QUEUE_MAX_AGE_MS, "300"))) {
            // When five clients push while the queue is paused for that second
            assertTrue(f.offer(client("probe"), payload("probe")));
            assertTrue(Waits.until(() -> f.metrics().value("endpoint-paused") == 1.0, Waits.EVENT_MS));
            for (int i = 0; i < 5; i++) {
                assertTrue(f.offer(client("c" + i), payload("old-" + i)));
            }
            // Then they are dropped as expired (not sent late), the probe went too, and
            assertTrue(Waits.until(() -> f.metrics().value("dropped-expired-total") == 6.0, Waits.EVENT_MS),
                "dropped-expired-total=" + f.metrics().value("dropped-expired-total"));
            // a fresh push after the pause is delivered at once
            assertTrue(f.offer(client("c0"), payload("fresh")));
            assertTrue(Waits.until(() -> f.metrics().value("forwarded-total") == 1.0, Waits.EVENT_MS));
            assertEquals(2, endpoint.received.size());
            assertEquals("fresh", body(endpoint.received.get(1)));
            assertEquals(6.0, f.metrics().value("dropped-total"));
        }
    }

    @Test
    void http429PacesTheClientAndItsNewestPushWins() throws Exception {
        // Given an endpoint that holds client a's first push, then answers it 429 (Retry-After: 1); 200 to the rest
        CountDownLatch answer = new CountDownLatch(1);
        try (TestEndpoint endpoint = new TestEndpoint(n -> {
            if (n != 0) {
                return TestEndpoint.Answer.ok();
            }
            try {
                answer.await(10, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            return new TestEndpoint.Answer(429, Map.of("Retry-After", "1"));
        }); Forwarder f = forwarder(endpoint.url(), Map.of())) {
            assertTrue(f.offer(client("a"), payload("a-old")));
            assertTrue(Waits.until(() -> endpoint.received.size() == 1, Waits.EVENT_MS));
            // When a pushes again and b pushes while a's first push is in flight, and then the 429 comes
            assertTrue(f.offer(client("a"), payload("a-new")));
            assertTrue(f.offer(client("b"), payload("b-0")));
            answer.countDown();
            // Then b is delivered at once, a's refused push is dropped as superseded by its newer one,
            assertTrue(Waits.until(() -> f.metrics().value("forwarded-total") == 2.0, Waits.EVENT_MS));
            assertEquals("b-0", body(endpoint.received.get(1)));
            assertEquals(1.0, f.metrics().value("dropped-superseded-total"));
            // and a's newer push is sent only after the second the endpoint asked for
            TestEndpoint.Received aNew = endpoint.received.get(2);
            assertEquals("a-new", body(aNew));
            long gapMs = (aNew.nanos() - endpoint.received.get(0).nanos()) / 1_000_000;
            assertTrue(gapMs >= 950, "a paced for " + gapMs + " ms, Retry-After asked 1000");
            assertEquals(3, endpoint.received.size());
            assertEquals(0.0, f.metrics().value("failed-total"));
        }
    }

    @Test
    void http503PausesTheWholeQueueInsteadOfSpinning() throws Exception {
        // Given an endpoint that answers 503 (Retry-After: 1) to its first request, and four senders
        try (TestEndpoint endpoint = new TestEndpoint(n -> n == 0
                ? new TestEndpoint.Answer(503, Map.of("Retry-After", "1"))
                : TestEndpoint.Answer.ok());
             Forwarder f = forwarder(endpoint.url(), Map.of(ForwarderConfig.SENDER_THREADS, "4"))) {
            // When one push meets the 503 and ten clients push during the pause
            assertTrue(f.offer(client("first"), payload("first")));
            assertTrue(Waits.until(() -> f.metrics().value("endpoint-paused") == 1.0, Waits.EVENT_MS));
            for (int i = 0; i < 10; i++) {
                assertTrue(f.offer(client("c" + i), payload("c-" + i)));
            }
            // Then nothing is sent for that second, after which all eleven are delivered and the pause ends
            assertTrue(Waits.until(() -> f.metrics().value("forwarded-total") == 11.0, Waits.EVENT_MS));
            long gapMs = (endpoint.received.get(1).nanos() - endpoint.received.get(0).nanos()) / 1_000_000;
            assertTrue(gapMs >= 950, "next request after " + gapMs + " ms, Retry-After asked 1000");
            assertEquals(12, endpoint.received.size());
            assertEquals(1.0, f.metrics().value("endpoint-unavailable-total"));
            assertEquals(0.0, f.metrics().value("endpoint-paused"));
            assertEquals(0.0, f.metrics().value("failed-total") + f.metrics().value("dropped-total"));
        }
    }

    @Test
    void aDeadEndpointCostsOneAttemptPerBackoffNotOnePerPush() throws Exception {
        // Given nothing listening, backoff 100 ms doubling up to 200 ms, four senders
        int port;
        try (ServerSocket s = new ServerSocket(0)) {
            port = s.getLocalPort();
        }
        try (Forwarder f = forwarder("http://127.0.0.1:" + port + "/v1/metrics", Map.of(
                ForwarderConfig.RETRY_BACKOFF_MS, "100", ForwarderConfig.RETRY_BACKOFF_MAX_MS, "200",
                ForwarderConfig.RETRIES_MAX, "100", ForwarderConfig.SENDER_THREADS, "4"))) {
            // When 100 clients push and a second passes
            for (int i = 0; i < 100; i++) {
                assertTrue(f.offer(client("c" + i), payload("p")));
            }
            Thread.sleep(1_000);
            // Then the endpoint was tried a handful of times (a probe per pause), not a hundred
            double attempts = f.metrics().value("endpoint-unavailable-total");
            assertTrue(attempts >= 2 && attempts <= 15, "attempts in 1 s: " + attempts);
            assertEquals(1.0, f.metrics().value("endpoint-paused"));
            // and every push is still held: waiting, or (at most one per sender) out as the pause's probe.
            // queue-bytes counts both, so it is exact; queue-depth only counts the waiting ones.
            assertEquals(100.0, f.metrics().value("queue-bytes"));
            double waiting = f.metrics().value("queue-depth");
            assertTrue(waiting >= 96 && waiting <= 100, "waiting: " + waiting);
            assertEquals(0.0, f.metrics().value("dropped-total"));
            assertEquals(0.0, f.metrics().value("forwarded-total"));
        }
    }

    @Test
    void http401ReReadsTheTokenFileAndRetriesWithTheRotatedToken(@TempDir Path dir) throws Exception {
        // Given an endpoint that accepts only its current token, and the plugin reading "old" from a file
        Path tokenFile = dir.resolve("token");
        Files.writeString(tokenFile, "old\n");
        java.util.concurrent.atomic.AtomicReference<String> accepted =
            new java.util.concurrent.atomic.AtomicReference<>("Bearer old");
        try (TestEndpoint endpoint = new TestEndpoint((n, request) ->
                accepted.get().equals(request.headers().get("authorization"))
                    ? TestEndpoint.Answer.ok() : new TestEndpoint.Answer(401, Map.of()));
             Forwarder f = forwarder(endpoint.url(), Map.of(ForwarderConfig.TOKEN_FILE, tokenFile.toString()))) {
            assertTrue(f.offer(client("a"), payload("one")));
            assertTrue(Waits.until(() -> f.metrics().value("forwarded-total") == 1.0, Waits.EVENT_MS));
            // When the token is rotated on both sides, the file keeping its modification time
            java.nio.file.attribute.FileTime mtime = Files.getLastModifiedTime(tokenFile);
            accepted.set("Bearer new");
            Files.writeString(tokenFile, "new\n");
            Files.setLastModifiedTime(tokenFile, mtime);
            assertTrue(f.offer(client("a"), payload("two")));
            // Then the push meets a 401, the plugin re-reads the file and the same push goes through at once
            assertTrue(Waits.until(() -> f.metrics().value("forwarded-total") == 2.0, Waits.EVENT_MS));
            assertEquals(3, endpoint.received.size());
            assertEquals("Bearer old", endpoint.received.get(1).headers().get("authorization"));
            assertEquals("Bearer new", endpoint.received.get(2).headers().get("authorization"));
            assertEquals("two", body(endpoint.received.get(2)));
            assertEquals(1.0, f.metrics().value("token-reloads-total"));
            assertEquals(0.0, f.metrics().value("failed-total") + f.metrics().value("dropped-total"));
            assertEquals(0.0, f.metrics().value("endpoint-unavailable-total"));
        }
    }

    @Test
    void http401WithAnUnchangedTokenPausesAndKeepsThePush(@TempDir Path dir) throws Exception {
        // Given an endpoint that refuses the plugin's token for its first two requests
        Path tokenFile = dir.resolve("token");
        Files.writeString(tokenFile, "t\n");
        try (TestEndpoint endpoint = new TestEndpoint(n -> n < 2
                ? new TestEndpoint.Answer(401, Map.of()) : TestEndpoint.Answer.ok());
             Forwarder f = forwarder(endpoint.url(), Map.of(ForwarderConfig.TOKEN_FILE, tokenFile.toString()))) {
            // When a push is offered
            assertTrue(f.offer(client("a"), payload("x")));
            // Then the re-read finds the same token, so the queue pauses and the push is delivered afterwards
            assertTrue(Waits.until(() -> f.metrics().value("forwarded-total") == 1.0, Waits.EVENT_MS));
            assertEquals(1.0, f.metrics().value("token-reloads-total"));
            assertEquals(2.0, f.metrics().value("endpoint-unavailable-total"));
            assertEquals(0.0, f.metrics().value("failed-total"));
        }
    }

    @Test
    void http401LongerThanTheRetryBudgetKeepsThePushUntilTheRotationArrives(@TempDir Path dir) throws Exception {
        // Given a token file and an endpoint that refuses it for six attempts (its side of a rotation lags),
        // with only two retries per push
        Path tokenFile = dir.resolve("token");
        Files.writeString(tokenFile, "t\n");
        try (TestEndpoint endpoint = new TestEndpoint(n -> n < 6
                ? new TestEndpoint.Answer(401, Map.of()) : TestEndpoint.Answer.ok());
             Forwarder f = forwarder(endpoint.url(), Map.of(ForwarderConfig.TOKEN_FILE, tokenFile.toString(),
                 ForwarderConfig.RETRIES_MAX, "2"))) {
            // When a push is offered
            assertTrue(f.offer(client("a"), payload("x")));
            // Then it waits out the 401s without spending its retries and is delivered, not failed
            assertTrue(Waits.until(() -> f.metrics().value("forwarded-total") == 1.0, Waits.EVENT_MS),
                "forwarded-total=" + f.metrics().value("forwarded-total"));
            assertEquals(7, endpoint.received.size());
            assertEquals(0.0, f.metrics().value("failed-total"));
        }
    }

    @Test
    void clientErrorIsNotRetried() throws Exception {
        // Given an endpoint that rejects the push as malformed
        try (TestEndpoint endpoint = new TestEndpoint(n -> new TestEndpoint.Answer(400, Map.of()));
             Forwarder f = forwarder(endpoint.url(), Map.of())) {
            assertTrue(f.offer(Map.of(), payload("x")));
            // Then it fails once, without retries
            assertTrue(Waits.until(() -> f.metrics().value("failed-total") == 1.0, Waits.EVENT_MS));
            assertEquals(1, endpoint.received.size());
            assertEquals(0.0, f.metrics().value("retries-total"));
        }
    }

    @Test
    void closeStopsTakingPushes() throws Exception {
        try (TestEndpoint endpoint = new TestEndpoint(n -> TestEndpoint.Answer.ok())) {
            Forwarder f = forwarder(endpoint.url(), Map.of());
            f.close();
            // Given a closed forwarder, When a push is offered, Then it is refused (and does not throw)
            assertFalse(f.offer(Map.of(), payload("late")));
        }
    }
}
