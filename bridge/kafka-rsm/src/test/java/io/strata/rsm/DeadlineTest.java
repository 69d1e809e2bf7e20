package io.strata.rsm;

import org.junit.jupiter.api.Test;

import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Exactly one of the exchange and the timer wins, and each side learns which. */
class DeadlineTest {
    @Test
    void metInTimeRunsNoAction() {
        AtomicInteger runs = new AtomicInteger();
        Deadline d = Deadline.start(TimeUnit.HOURS.toMillis(1), runs::incrementAndGet);
        assertTrue(d.meet());
        assertFalse(d.expired());
        assertFalse(d.meet(), "a deadline is met once");
        d.cancel();
        assertEquals(0, runs.get());
    }

    @Test
    void expiredRunsTheActionOnceAndCannotBeMet() throws InterruptedException {
        CountDownLatch ran = new CountDownLatch(1);
        AtomicInteger runs = new AtomicInteger();
        Deadline d = Deadline.start(1, () -> {
            runs.incrementAndGet();
            ran.countDown();
        });
        assertTrue(ran.await(1, TimeUnit.MINUTES), "the timer ran the action");
        assertTrue(d.expired());
        assertFalse(d.meet(), "an exchange finishing after the timer fired is late");
        d.cancel();
        assertEquals(1, runs.get());
    }
}
