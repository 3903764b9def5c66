package dev.kct.telemetry;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.LongSupplier;

/**
 * The pushes waiting to be sent, kept so that an outage leaves nobody starved and nothing stale.
 *
 * <p>Why not one FIFO: after an outage a single FIFO holds up to {@code queue.capacity} old pushes, and
 * every client's fresh push waits behind all of them (minutes, with retries). Here:
 * <ul>
 *   <li>Each client instance has its own sub-queue; senders serve the clients round robin, one push in
 *       flight per client, so a client with a backlog cannot hold up the others.</li>
 *   <li>Within a client the newest push goes first: after an outage every client's current metrics reach
 *       the endpoint in the first round, and the backlog follows newest to oldest while there is spare
 *       capacity. Pushes older than {@code queue.max.age.ms} are dropped (counted as expired).</li>
 *   <li>Bounded by count and bytes (in-flight pushes included). When full, the oldest push of the
 *       offering client goes, else the oldest push of another client (rotating): the queue keeps the
 *       freshest pushes. {@link #offer} never blocks: it runs on the broker's request thread.</li>
 *   <li>An endpoint that is down (connection refused, timeouts, 503) pauses the whole queue with
 *       backoff; after the pause one push probes the endpoint while the other senders wait, so a dead
 *       endpoint costs one attempt per backoff period instead of a spinning sender per push.</li>
 *   <li>A rate-limited client (429) is paced on its own; its refused push goes back only if no newer push
 *       of that client is waiting (latest wins).</li>
 * </ul>
 */
final class PushQueue {

    /** Why a push was dropped; each reason has its own counter. */
    enum DropReason {
        QUEUE_FULL("queue-full"),
        EXPIRED("expired"),
        SUPERSEDED("superseded"),
        SHUTDOWN("shutdown");

        final String metric;

        DropReason(String metric) {
            this.metric = metric;
        }
    }

    /** Told about every push the queue drops. Called with the queue's lock held: must be quick. */
    interface DropListener {
        void dropped(DropReason reason, Item item);
    }

    /** One queued push and what the senders have learnt about it. */
    static final class Item {
        final Forwarder.Push push;
        final String client;
        final long bornNanos;
        int attempts;
        boolean tokenReloaded;
        /** Handed to a sender and not yet settled (guarded by the queue's lock). */
        boolean inFlight;

        Item(Forwarder.Push push, String client, long bornNanos) {
            this.push = push;
            this.client = client;
            this.bornNanos = bornNanos;
        }

        int size() {
            return push.body().length;
        }
    }

    private static final class ClientQueue {
        final String key;
        /** Oldest first. */
        final ArrayDeque<Item> items = new ArrayDeque<>();
        boolean busy;
        boolean inRing;
        long notBeforeNanos;
        boolean paced;
        int rateLimited;

        ClientQueue(String key) {
            this.key = key;
        }
    }

    private static final long PURGE_EVERY_NANOS = TimeUnit.SECONDS.toNanos(1);

    private final int capacity;
    private final long maxBytes;
    private final long maxAgeNanos;
    private final DropListener drops;
    private final LongSupplier clock;
    private final ReentrantLock lock = new ReentrantLock();
    private final Condition changed = lock.newCondition();
    private final Map<String, ClientQueue> clients = new HashMap<>();
    /** Clients with waiting pushes and nothing in flight, in serving order. */
    private final ArrayDeque<ClientQueue> ring = new ArrayDeque<>();
    private int waiting;
    private int inFlight;
    private long bytes;
    private int endpointFailures;
    private long pausedUntilNanos;
    private long lastPurgeNanos;
    private boolean closed;

    PushQueue(int capacity, long maxBytes, long maxAgeMs, DropListener drops, LongSupplier clock) {
        this.capacity = capacity;
        this.maxBytes = maxBytes;
        this.maxAgeNanos = TimeUnit.MILLISECONDS.toNanos(maxAgeMs);
        this.drops = drops;
        this.clock = clock;
        this.lastPurgeNanos = clock.getAsLong();
        this.pausedUntilNanos = lastPurgeNanos;
    }

    /**
     * Add a push of {@code client} without blocking, making room by dropping older pushes when full.
     * Returns false when this push itself was dropped (queue closed, larger than the byte bound, or
     * everything else in flight).
     */
    boolean offer(String client, Forwarder.Push push) {
        long now = clock.getAsLong();
        Item item = new Item(push, client, now);
        lock.lock();
        try {
            if (closed) {
                drops.dropped(DropReason.SHUTDOWN, item);
                return false;
            }
            if (item.size() > maxBytes) {
                drops.dropped(DropReason.QUEUE_FULL, item);
                return false;
            }
            ClientQueue cq = clients.computeIfAbsent(client, ClientQueue::new);
            expireOldest(cq, now);
            while (waiting + inFlight + 1 > capacity || bytes + item.size() > maxBytes) {
                ClientQueue victim = cq.items.isEmpty() ? victim() : cq;
                if (victim == null) {
                    drops.dropped(DropReason.QUEUE_FULL, item);
                    forgetIfIdle(cq, now);
                    return false;
                }
                Item oldest = victim.items.pollFirst();
                uncount(oldest);
                drops.dropped(DropReason.QUEUE_FULL, oldest);
                if (victim.items.isEmpty()) {
                    leaveRing(victim);
                }
            }
            cq.items.addLast(item);
            waiting++;
            bytes += item.size();
            joinRing(cq);
            changed.signal();
            return true;
        } finally {
            lock.unlock();
        }
    }

    /** The client whose oldest push makes room for another client's: the next in the ring, rotated. */
    private ClientQueue victim() {
        for (int n = ring.size(); n > 0; n--) {
            ClientQueue head = ring.pollFirst();
            if (head.items.isEmpty()) {  // emptied by expiry; nextReady would drop it from the ring anyway
                head.inRing = false;
                continue;
            }
            ring.addLast(head);
            return head;
        }
        for (ClientQueue cq : clients.values()) {  // only busy clients hold pushes: rare, so a scan is fine
            if (!cq.items.isEmpty()) {
                return cq;
            }
        }
        return null;
    }

    /**
     * The next push to send, waiting up to {@code timeoutNanos}: round robin over the clients, the
     * client's newest push first. Null on timeout. While the endpoint is paused nothing is handed out;
     * after a pause only one push at a time (the probe) until one succeeds.
     */
    Item take(long timeoutNanos) throws InterruptedException {
        lock.lockInterruptibly();
        try {
            long deadline = clock.getAsLong() + timeoutNanos;
            while (true) {
                long now = clock.getAsLong();
                if (now - lastPurgeNanos >= PURGE_EVERY_NANOS) {
                    purge(now);
                }
                long wakeAt = deadline;
                if (endpointFailures > 0 && now - pausedUntilNanos < 0) {
                    wakeAt = earlier(wakeAt, pausedUntilNanos);
                } else if (endpointFailures == 0 || inFlight == 0) {
                    Item item = nextReady(now);
                    if (item != null) {
                        return item;
                    }
                    long paced = earliestPaced();
                    if (paced != Long.MAX_VALUE) {
                        wakeAt = earlier(wakeAt, paced);
                    }
                }
                if (deadline - now <= 0) {
                    return null;
                }
                changed.awaitNanos(Math.max(1, wakeAt - now));
            }
        } finally {
            lock.unlock();
        }
    }

    private static long earlier(long a, long b) {
        return a - b <= 0 ? a : b;
    }

    private Item nextReady(long now) {
        for (int n = ring.size(); n > 0; n--) {
            ClientQueue cq = ring.pollFirst();
            cq.inRing = false;
            expireOldest(cq, now);
            if (cq.items.isEmpty()) {
                forgetIfIdle(cq, now);
                continue;
            }
            if (cq.paced && now - cq.notBeforeNanos < 0) {
                ring.addLast(cq);
                cq.inRing = true;
                continue;
            }
            cq.paced = false;
            Item item = cq.items.pollLast();
            waiting--;
            inFlight++;
            item.inFlight = true;
            cq.busy = true;
            return item;
        }
        return null;
    }

    private long earliestPaced() {
        long earliest = Long.MAX_VALUE;
        for (ClientQueue cq : ring) {
            if (cq.paced && (earliest == Long.MAX_VALUE || cq.notBeforeNanos - earliest < 0)) {
                earliest = cq.notBeforeNanos;
            }
        }
        return earliest;
    }

    /** The push was delivered: the endpoint works, the client is no longer rate limited. */
    void delivered(Item item) {
        lock.lock();
        try {
            ClientQueue cq = release(item);
            cq.rateLimited = 0;
            if (endpointFailures > 0) {
                endpointFailures = 0;
                changed.signalAll();
            }
        } finally {
            lock.unlock();
        }
    }

    /** The push is given up (refused, or out of attempts); it leaves the queue. */
    void failed(Item item) {
        lock.lock();
        try {
            release(item);
        } finally {
            lock.unlock();
        }
    }

    /**
     * The endpoint is unavailable: count a consecutive failure and return how many there are now, so the
     * caller can size the pause (exponential backoff) before {@link #pause}.
     */
    int endpointFailed() {
        lock.lock();
        try {
            return ++endpointFailures;
        } finally {
            lock.unlock();
        }
    }

    /** Hold every push for {@code delayNanos} (never shortening a longer pause already set). */
    void pause(long delayNanos) {
        lock.lock();
        try {
            long until = clock.getAsLong() + delayNanos;
            if (endpointFailures == 0) {
                endpointFailures = 1;
            }
            if (until - pausedUntilNanos > 0) {
                pausedUntilNanos = until;
            }
        } finally {
            lock.unlock();
        }
    }

    /** A different endpoint was configured: what was learnt about the old one no longer applies. */
    void endpointChanged() {
        lock.lock();
        try {
            endpointFailures = 0;
            pausedUntilNanos = clock.getAsLong();
            changed.signalAll();
        } finally {
            lock.unlock();
        }
    }

    /** Put a push back to be tried again once the endpoint is back (its age still counts). */
    void retry(Item item) {
        lock.lock();
        try {
            ClientQueue cq = release(item);
            insertByAge(cq, item);
            waiting++;
            bytes += item.size();
            joinRing(cq);
        } finally {
            lock.unlock();
        }
    }

    /**
     * The endpoint refused this client's push for now (429): pace the client for {@code delayNanos}, and
     * (when {@code again}) put the push back unless a newer push of the client is waiting, which wins.
     */
    void rateLimited(Item item, long delayNanos, boolean again) {
        lock.lock();
        try {
            ClientQueue cq = release(item);
            cq.rateLimited++;
            cq.paced = true;
            cq.notBeforeNanos = clock.getAsLong() + delayNanos;
            Item newest = cq.items.peekLast();
            if (!again) {
                return;  // out of attempts: the caller counts it as failed
            }
            if (newest != null && newest.bornNanos - item.bornNanos > 0) {
                drops.dropped(DropReason.SUPERSEDED, item);
            } else {
                insertByAge(cq, item);
                waiting++;
                bytes += item.size();
            }
            joinRing(cq);
        } finally {
            lock.unlock();
        }
    }

    /** Consecutive 429s of the push's client so far (for its backoff). */
    int rateLimitedCount(Item item) {
        lock.lock();
        try {
            ClientQueue cq = clients.get(item.client);
            return cq == null ? 0 : cq.rateLimited;
        } finally {
            lock.unlock();
        }
    }

    private ClientQueue release(Item item) {
        ClientQueue cq = clients.computeIfAbsent(item.client, ClientQueue::new);
        if (!item.inFlight) {
            throw new IllegalStateException("push settled twice");
        }
        item.inFlight = false;
        cq.busy = false;
        inFlight--;
        bytes -= item.size();
        joinRing(cq);
        changed.signalAll();
        return cq;
    }

    private static void insertByAge(ClientQueue cq, Item item) {
        ArrayDeque<Item> newer = new ArrayDeque<>();
        while (!cq.items.isEmpty() && cq.items.peekLast().bornNanos - item.bornNanos > 0) {
            newer.push(cq.items.pollLast());
        }
        cq.items.addLast(item);
        while (!newer.isEmpty()) {
            cq.items.addLast(newer.pop());
        }
    }

    private void joinRing(ClientQueue cq) {
        if (!cq.inRing && !cq.busy && !cq.items.isEmpty()) {
            ring.addLast(cq);
            cq.inRing = true;
        }
    }

    private void leaveRing(ClientQueue cq) {
        if (cq.inRing) {
            ring.remove(cq);
            cq.inRing = false;
        }
    }

    private void forgetIfIdle(ClientQueue cq, long now) {
        if (cq.items.isEmpty() && !cq.busy && !cq.inRing && (!cq.paced || now - cq.notBeforeNanos >= 0)
                && cq.rateLimited == 0) {
            clients.remove(cq.key, cq);
        }
    }

    private void expireOldest(ClientQueue cq, long now) {
        while (!cq.items.isEmpty() && now - cq.items.peekFirst().bornNanos > maxAgeNanos) {
            Item old = cq.items.pollFirst();
            uncount(old);
            drops.dropped(DropReason.EXPIRED, old);
        }
    }

    private void uncount(Item item) {
        waiting--;
        bytes -= item.size();
    }

    /** Drop expired pushes everywhere (also while paused, when nothing is taken) and forget idle clients. */
    private void purge(long now) {
        lastPurgeNanos = now;
        Iterator<ClientQueue> it = clients.values().iterator();
        while (it.hasNext()) {
            ClientQueue cq = it.next();
            expireOldest(cq, now);
            if (cq.items.isEmpty()) {
                leaveRing(cq);
                if (!cq.busy && (!cq.paced || now - cq.notBeforeNanos >= 0)) {
                    it.remove();
                }
            }
        }
    }

    /** Refuse further pushes and wake every waiting sender. */
    void close() {
        lock.lock();
        try {
            closed = true;
            changed.signalAll();
        } finally {
            lock.unlock();
        }
    }

    /** Remove and return every waiting push (at shutdown). */
    List<Item> drain() {
        lock.lock();
        try {
            List<Item> out = new ArrayList<>();
            for (ClientQueue cq : clients.values()) {
                for (Item item : cq.items) {
                    out.add(item);
                    bytes -= item.size();
                }
                cq.items.clear();
            }
            waiting = 0;
            ring.clear();
            for (ClientQueue cq : clients.values()) {
                cq.inRing = false;
            }
            return out;
        } finally {
            lock.unlock();
        }
    }

    /** Pushes waiting (not in flight). */
    int size() {
        lock.lock();
        try {
            return waiting;
        } finally {
            lock.unlock();
        }
    }

    /** Payload bytes waiting or in flight. */
    long bytes() {
        lock.lock();
        try {
            return bytes;
        } finally {
            lock.unlock();
        }
    }

    /** Clients with at least one push waiting. */
    int clientsWaiting() {
        lock.lock();
        try {
            int n = 0;
            for (ClientQueue cq : clients.values()) {
                if (!cq.items.isEmpty()) {
                    n++;
                }
            }
            return n;
        } finally {
            lock.unlock();
        }
    }

    /** 1 while the endpoint is considered unavailable (paused, or probing after a pause), else 0. */
    int endpointPaused() {
        lock.lock();
        try {
            return endpointFailures > 0 ? 1 : 0;
        } finally {
            lock.unlock();
        }
    }
}
