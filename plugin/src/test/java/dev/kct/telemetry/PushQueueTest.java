package dev.kct.telemetry;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.EnumMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import org.junit.jupiter.api.Test;

/** The queue on its own, with a hand-driven clock: take(0) never waits. */
class PushQueueTest {

    private final AtomicLong clock = new AtomicLong(1_000_000_000L);
    private final Map<PushQueue.DropReason, List<String>> dropped = new EnumMap<>(PushQueue.DropReason.class);

    private PushQueue queue(int capacity, long maxAgeMs) {
        return new PushQueue(capacity, 1 << 20, maxAgeMs,
            (reason, item) -> dropped.computeIfAbsent(reason, r -> new ArrayList<>()).add(text(item)),
            clock::get);
    }

    private static Forwarder.Push push(String text) {
        return new Forwarder.Push(text.getBytes(StandardCharsets.UTF_8), Map.of());
    }

    private static String text(PushQueue.Item item) {
        return new String(item.push.body(), StandardCharsets.UTF_8);
    }

    private String takeNow(PushQueue q) throws InterruptedException {
        PushQueue.Item item = q.take(0);
        return item == null ? null : text(item);
    }

    private void advanceMs(long ms) {
        clock.addAndGet(TimeUnit.MILLISECONDS.toNanos(ms));
    }

    @Test
    void aClientsBacklogDoesNotHoldUpOtherClients() throws Exception {
        // Given client a with a backlog of 100 pushes, then one push each from b and c
        PushQueue q = queue(1_000, 60_000);
        for (int i = 0; i < 100; i++) {
            q.offer("a", push("a" + i));
            advanceMs(1);
        }
        q.offer("b", push("b0"));
        q.offer("c", push("c0"));
        // When three senders take a push each
        // Then each client gets one (a's newest first), not three of a's backlog
        assertEquals("a99", takeNow(q));
        assertEquals("b0", takeNow(q));
        assertEquals("c0", takeNow(q));
        // and a's next push waits until its first is settled (one in flight per client keeps its order)
        assertNull(takeNow(q));
    }

    @Test
    void clientsAreServedRoundRobin() throws Exception {
        // Given two clients with three pushes each
        PushQueue q = queue(1_000, 60_000);
        for (int i = 0; i < 3; i++) {
            q.offer("a", push("a" + i));
            q.offer("b", push("b" + i));
            advanceMs(1);
        }
        // When one sender takes and delivers push after push
        List<String> order = new ArrayList<>();
        PushQueue.Item item;
        while ((item = q.take(0)) != null) {
            order.add(text(item));
            q.delivered(item);
        }
        // Then the clients alternate, each newest to oldest
        assertEquals(List.of("a2", "b2", "a1", "b1", "a0", "b0"), order);
        assertEquals(0, q.size());
        assertEquals(0, q.bytes());
    }

    @Test
    void pushesOlderThanMaxAgeAreDroppedAndCounted() throws Exception {
        // Given a queue with max age 1 s holding two old pushes and one fresh one
        PushQueue q = queue(1_000, 1_000);
        q.offer("a", push("old-a"));
        q.offer("b", push("old-b"));
        advanceMs(900);
        q.offer("a", push("fresh-a"));
        // When 200 ms pass (the old ones are now 1.1 s old)
        advanceMs(200);
        // Then only the fresh push is handed out; the old ones are dropped as expired
        assertEquals("fresh-a", takeNow(q));
        assertNull(takeNow(q));
        assertEquals(List.of("old-a", "old-b"), dropped.get(PushQueue.DropReason.EXPIRED));
        assertEquals(0, q.size());
    }

    @Test
    void fullQueueDropsTheOldestPushOfTheOfferingClientFirst() throws Exception {
        // Given a full queue of three: a0, a1 and b0
        PushQueue q = queue(3, 60_000);
        q.offer("a", push("a0"));
        q.offer("a", push("a1"));
        q.offer("b", push("b0"));
        // When a offers another push, and then a new client c
        assertTrue(q.offer("a", push("a2")));
        assertTrue(q.offer("c", push("c0")));
        // Then a's oldest made room for a's push, and another client's oldest for c's: nobody is refused
        assertEquals(3, q.size());
        List<String> drops = dropped.get(PushQueue.DropReason.QUEUE_FULL);
        assertEquals("a0", drops.get(0));
        assertEquals(2, drops.size());
        assertTrue(List.of("a1", "b0").contains(drops.get(1)), drops.toString());
    }

    @Test
    void anUnavailableEndpointPausesEverythingThenOneProbeAtATime() throws Exception {
        // Given pushes of three clients and a sender whose attempt found the endpoint down
        PushQueue q = queue(1_000, 60_000);
        q.offer("a", push("a0"));
        q.offer("b", push("b0"));
        q.offer("c", push("c0"));
        PushQueue.Item first = q.take(0);
        assertEquals(1, q.endpointFailed());
        q.pause(TimeUnit.MILLISECONDS.toNanos(500));
        q.retry(first);
        // When senders ask during the pause, Then they get nothing
        assertNull(takeNow(q));
        assertEquals(1, q.endpointPaused());
        // When the pause is over, Then one push probes the endpoint and the others wait for its answer
        advanceMs(500);
        PushQueue.Item probe = q.take(0);
        assertNotNull(probe);
        assertNull(takeNow(q));
        // When the probe is delivered, Then the queue flows again
        q.delivered(probe);
        assertEquals(0, q.endpointPaused());
        assertNotNull(q.take(0));
        assertNotNull(q.take(0));
    }

    @Test
    void aNewEndpointEndsThePauseOfTheOldOne() throws Exception {
        // Given a queue paused for a minute because the endpoint was down
        PushQueue q = queue(1_000, 60_000);
        q.offer("a", push("a0"));
        q.endpointFailed();
        q.pause(TimeUnit.SECONDS.toNanos(60));
        assertNull(takeNow(q));
        // When another endpoint is configured, Then pushes flow at once
        q.endpointChanged();
        assertEquals("a0", takeNow(q));
        assertEquals(0, q.endpointPaused());
    }

    @Test
    void aRateLimitedClientIsPacedAndItsNewestPushWins() throws Exception {
        // Given client a's push in flight, a newer push of a waiting, and b's push
        PushQueue q = queue(1_000, 60_000);
        q.offer("a", push("a0"));
        PushQueue.Item inFlight = q.take(0);
        advanceMs(10);
        q.offer("a", push("a1"));
        q.offer("b", push("b0"));
        // When the endpoint answers 429 to a's push, asking for 1 s
        q.rateLimited(inFlight, TimeUnit.SECONDS.toNanos(1), true);
        // Then the refused push is dropped as superseded, b is served, and a waits out its second
        assertEquals(List.of("a0"), dropped.get(PushQueue.DropReason.SUPERSEDED));
        assertEquals("b0", takeNow(q));
        assertNull(takeNow(q));
        advanceMs(1_000);
        assertEquals("a1", takeNow(q));
    }

    @Test
    void aRateLimitedPushWithNothingNewerGoesBack() throws Exception {
        // Given a's only push refused with 429
        PushQueue q = queue(1_000, 60_000);
        q.offer("a", push("a0"));
        q.rateLimited(q.take(0), TimeUnit.MILLISECONDS.toNanos(200), true);
        // Then it is tried again after the client's pause, not dropped
        assertNull(takeNow(q));
        advanceMs(200);
        assertEquals("a0", takeNow(q));
        assertFalse(dropped.containsKey(PushQueue.DropReason.SUPERSEDED));
    }

    @Test
    void closedQueueRefusesAndDrainReturnsWhatIsLeft() throws Exception {
        PushQueue q = queue(1_000, 60_000);
        q.offer("a", push("a0"));
        q.offer("b", push("b0"));
        q.close();
        assertFalse(q.offer("c", push("c0")));
        assertEquals(List.of("c0"), dropped.get(PushQueue.DropReason.SHUTDOWN));
        assertEquals(2, q.drain().size());
        assertEquals(0, q.size());
        assertEquals(0, q.bytes());
    }
}
