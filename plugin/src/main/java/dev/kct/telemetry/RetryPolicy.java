package dev.kct.telemetry;

import java.time.Duration;
import java.time.Instant;
import java.time.ZonedDateTime;
import java.time.format.DateTimeFormatter;
import java.time.format.DateTimeParseException;
import java.util.Optional;
import java.util.concurrent.ThreadLocalRandom;

/**
 * When to retry a push and how long to wait: exponential backoff with jitter, overridden upward by
 * the receiver's {@code Retry-After} on 429/503 (RFC 9110: delay-seconds or an HTTP-date), and capped
 * so a hostile or confused receiver cannot park the sender for hours.
 */
public final class RetryPolicy {

    /** Longest wait a Retry-After may impose before one retry. */
    static final Duration RETRY_AFTER_CAP = Duration.ofMinutes(5);

    private final long backoffMs;
    private final long backoffMaxMs;

    public RetryPolicy(long backoffMs, long backoffMaxMs) {
        this.backoffMs = backoffMs;
        this.backoffMaxMs = backoffMaxMs;
    }

    /** Status codes worth another try: the receiver is busy, restarting, or a proxy timed out. */
    public static boolean retryable(int status) {
        return status == 408 || status == 429 || status == 502 || status == 503 || status == 504;
    }

    /** Exponential backoff for the given attempt (1 = first retry), with up to 20% jitter, capped. */
    public long backoffMs(int attempt) {
        double exp = backoffMs * Math.pow(2, Math.max(0, attempt - 1));
        long base = (long) Math.min(exp, backoffMaxMs);
        long jitter = base / 5 == 0 ? 0 : ThreadLocalRandom.current().nextLong(base / 5 + 1);
        return Math.min(backoffMaxMs, base + jitter);
    }

    /** The wait before the next attempt: the larger of the backoff and the server's Retry-After. */
    public long delayMs(int attempt, int status, Optional<String> retryAfter, Instant now) {
        long backoff = backoffMs(attempt);
        if ((status == 429 || status == 503) && retryAfter.isPresent()) {
            Optional<Duration> asked = parseRetryAfter(retryAfter.get(), now);
            if (asked.isPresent()) {
                long askedMs = Math.min(asked.get().toMillis(), RETRY_AFTER_CAP.toMillis());
                return Math.max(backoff, askedMs);
            }
        }
        return backoff;
    }

    /** Parse a Retry-After value: non-negative delay-seconds, or an IMF-fixdate (past dates mean 0). */
    public static Optional<Duration> parseRetryAfter(String value, Instant now) {
        String v = value.trim();
        if (v.isEmpty()) {
            return Optional.empty();
        }
        if (v.chars().allMatch(Character::isDigit)) {
            try {
                return Optional.of(Duration.ofSeconds(Long.parseLong(v)));
            } catch (NumberFormatException e) {
                return Optional.of(RETRY_AFTER_CAP);
            }
        }
        try {
            Instant at = ZonedDateTime.parse(v, DateTimeFormatter.RFC_1123_DATE_TIME).toInstant();
            Duration d = Duration.between(now, at);
            return Optional.of(d.isNegative() ? Duration.ZERO : d);
        } catch (DateTimeParseException e) {
            return Optional.empty();
        }
    }
}
