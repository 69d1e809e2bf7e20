package io.strata.rsm;

import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A time limit on one blocking exchange: when it passes first, it runs its action (closing the
 * connection, which wakes the blocked reader); whoever finishes first, the exchange or the timer,
 * wins, and the other side learns it. One daemon thread serves every deadline of the bridge.
 */
final class Deadline {
    /** Runs the expired deadlines (one daemon thread for all clients). */
    private static final ScheduledThreadPoolExecutor TIMER = timer();

    private static final int RUNNING = 0;
    private static final int MET = 1;
    private static final int EXPIRED = 2;

    private final AtomicInteger state = new AtomicInteger(RUNNING);
    private final ScheduledFuture<?> task;

    private Deadline(long timeoutMs, Runnable onExpiry) {
        this.task = TIMER.schedule(() -> {
            if (state.compareAndSet(RUNNING, EXPIRED)) {
                onExpiry.run();
            }
        }, timeoutMs, TimeUnit.MILLISECONDS);
    }

    /** Starts a deadline of {@code timeoutMs}; {@code onExpiry} runs on the timer thread if it passes first. */
    static Deadline start(long timeoutMs, Runnable onExpiry) {
        return new Deadline(timeoutMs, onExpiry);
    }

    /** The exchange finished: true if in time, false if the deadline had already passed (its action ran). */
    boolean meet() {
        return state.compareAndSet(RUNNING, MET);
    }

    /** Whether the deadline passed before the exchange finished (so a failure is a timeout). */
    boolean expired() {
        return state.get() == EXPIRED;
    }

    /** Drops the pending timer task; call once the exchange is over, however it ended. */
    void cancel() {
        task.cancel(false);
    }

    private static ScheduledThreadPoolExecutor timer() {
        ScheduledThreadPoolExecutor t = new ScheduledThreadPoolExecutor(1, r -> {
            Thread th = new Thread(r, "strata-rsm-timeouts");
            th.setDaemon(true);
            return th;
        });
        t.setRemoveOnCancelPolicy(true);
        return t;
    }
}
