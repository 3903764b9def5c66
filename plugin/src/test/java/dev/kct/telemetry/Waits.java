package dev.kct.telemetry;

import java.util.function.BooleanSupplier;

final class Waits {
    /**
     * How long a test waits for an event that normally comes within a second: an upper bound, never a figure
     * under test (a wait returns as soon as its condition holds). Generous because CI runs its three lanes
     * on two cores, where 5-10 s deadlines missed events that did come.
     */
    static final long EVENT_MS = 60_000;

    private Waits() {
    }

    /** Poll until the condition holds or the timeout passes; returns whether it held. */
    static boolean until(BooleanSupplier condition, long timeoutMs) throws InterruptedException {
        long deadline = System.nanoTime() + timeoutMs * 1_000_000L;
        while (System.nanoTime() < deadline) {
            if (condition.getAsBoolean()) {
                return true;
            }
            Thread.sleep(10);
        }
        return condition.getAsBoolean();
    }
}
