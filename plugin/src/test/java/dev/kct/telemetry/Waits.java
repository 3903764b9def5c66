package dev.kct.telemetry;

import java.util.function.BooleanSupplier;

final class Waits {
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
