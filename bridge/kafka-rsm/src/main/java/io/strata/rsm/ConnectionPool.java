package io.strata.rsm;

import java.time.Duration;
import java.util.ArrayDeque;
import java.util.function.LongPredicate;

/**
 * The idle connections of one client, kept for reuse: at most {@link #MAX_IDLE}, none older than
 * {@link #MAX_IDLE_NANOS}, the most recently used first. A connection is in the pool or in one
 * caller's hands, never both; once the pool is closed, returned connections are closed.
 */
final class ConnectionPool {
    /** Idle connections kept; the broker runs about 10 remote reader threads by default. */
    static final int MAX_IDLE = 16;
    /** Idle connections older than this are closed instead of reused (servers drop idle ones). */
    static final long MAX_IDLE_NANOS = Duration.ofSeconds(20).toNanos();

    /** Whether idle TCP connections may still be used at a given {@link System#nanoTime()}. */
    private final LongPredicate keepsTcp;
    private final ArrayDeque<TierConnection> idle = new ArrayDeque<>();
    private boolean closed;

    ConnectionPool(LongPredicate keepsTcp) {
        this.keepsTcp = keepsTcp;
    }

    /** An idle connection to reuse, or {@code null}; the stale ones met on the way are closed. */
    TierConnection take() {
        long now = System.nanoTime();
        while (true) {
            TierConnection c;
            synchronized (idle) {
                c = idle.pollFirst();
            }
            if (c == null) {
                return null;
            }
            // TCP connections are retired once strata tier's Unix socket is known, and once a
            // failed socket is due for another try (UnixSocketTransport.keepsTcp).
            if (now - c.idleSince < MAX_IDLE_NANOS && (c.unix || keepsTcp.test(now))) {
                return c;
            }
            c.close();
        }
    }

    /** A connection whose last exchange ended cleanly: kept for reuse, or closed if the pool is full or closed. */
    void release(TierConnection c) {
        c.idleSince = System.nanoTime();
        synchronized (idle) {
            if (!closed && idle.size() < MAX_IDLE) {
                idle.addFirst(c);
                return;
            }
        }
        c.close();
    }

    /** Closes the idle connections; those in use are closed when they come back. */
    void close() {
        ArrayDeque<TierConnection> drop;
        synchronized (idle) {
            closed = true;
            drop = new ArrayDeque<>(idle);
            idle.clear();
        }
        for (TierConnection c : drop) {
            c.close();
        }
    }
}
