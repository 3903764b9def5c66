package dev.kct.telemetry;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.time.Instant;
import java.util.Optional;

import org.junit.jupiter.api.Test;

class RetryPolicyTest {

    private static final Instant NOW = Instant.parse("2026-11-21T10:00:00Z");

    @Test
    void retryAfterAcceptsSecondsAndHttpDates() {
        assertEquals(Optional.of(Duration.ofSeconds(7)), RetryPolicy.parseRetryAfter("7", NOW));
        assertEquals(Optional.of(Duration.ofSeconds(30)),
            RetryPolicy.parseRetryAfter("Sat, 21 Nov 2026 10:00:30 GMT", NOW));
        assertEquals(Optional.of(Duration.ZERO), RetryPolicy.parseRetryAfter("Sat, 21 Nov 2026 09:00:00 GMT", NOW));
        assertEquals(Optional.empty(), RetryPolicy.parseRetryAfter("soon", NOW));
    }

    @Test
    void retryAfterOverridesBackoffOnlyOn429And503AndIsCapped() {
        RetryPolicy policy = new RetryPolicy(100, 1_000);
        assertEquals(7_000, policy.delayMs(1, 503, Optional.of("7"), NOW));
        assertEquals(7_000, policy.delayMs(1, 429, Optional.of("7"), NOW));
        assertTrue(policy.delayMs(1, 502, Optional.of("7"), NOW) <= 1_000);
        assertEquals(RetryPolicy.RETRY_AFTER_CAP.toMillis(), policy.delayMs(1, 503, Optional.of("999999"), NOW));
    }

    @Test
    void backoffGrowsExponentiallyUpToTheMax() {
        RetryPolicy policy = new RetryPolicy(100, 1_000);
        long first = policy.backoffMs(1);
        long third = policy.backoffMs(3);
        assertTrue(first >= 100 && first <= 120, "first=" + first);
        assertTrue(third >= 400 && third <= 480, "third=" + third);
        assertEquals(1_000, policy.backoffMs(20));
    }
}
