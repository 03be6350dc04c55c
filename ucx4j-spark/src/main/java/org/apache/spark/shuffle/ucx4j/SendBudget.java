package org.apache.spark.shuffle.ucx4j;

import java.io.InterruptedIOException;
import java.util.concurrent.Semaphore;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The bytes a block server may have in flight to one reducer: a block waits until the sends before it leave room for
 * it, in the order the blocks came (a fair semaphore counted in KiB), and one block always goes when nothing else is
 * in flight, however large. A send releases its share when it completes, successfully or not (a failed connection
 * completes every send), so a wait ends when the reducer takes data or goes.
 */
final class SendBudget {
    private static final int UNIT_SHIFT = 10;

    private final int units;
    private final Semaphore room;
    private final AtomicLong inFlight = new AtomicLong();
    /** The most bytes ever in flight on any one budget sharing it (tests read it). */
    private final AtomicLong peak;
    /** The bytes in flight on all budgets sharing it. */
    private final AtomicLong total;

    /**
     * A budget of {@code bytes} (at least 1 KiB) whose high-water mark is kept in {@code peak} and whose bytes in
     * flight are added to {@code total}.
     */
    SendBudget(long bytes, AtomicLong peak, AtomicLong total) {
        if (bytes <= 0) {
            throw new IllegalArgumentException("ucx4j shuffle: the server's bytes in flight must be positive, got "
                    + bytes);
        }
        this.units = (int) Math.min(Integer.MAX_VALUE, Math.max(1, bytes >>> UNIT_SHIFT));
        this.room = new Semaphore(units, true);
        this.peak = peak;
        this.total = total;
    }

    /** Waits until {@code bytes} more may be sent; pair each call with one {@link #release(long)}. */
    void acquire(long bytes) throws InterruptedIOException {
        try {
            room.acquire(unitsOf(bytes));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new InterruptedIOException("ucx4j shuffle: interrupted while waiting to send");
        }
        long now = inFlight.addAndGet(bytes);
        peak.accumulateAndGet(now, Math::max);
        total.addAndGet(bytes);
    }

    /** A send of {@code bytes} ended. */
    void release(long bytes) {
        inFlight.addAndGet(-bytes);
        total.addAndGet(-bytes);
        room.release(unitsOf(bytes));
    }

    /** Whole KiB, rounded up; a block larger than the budget takes all of it (so it goes alone). */
    private int unitsOf(long bytes) {
        long u = (bytes + (1L << UNIT_SHIFT) - 1) >>> UNIT_SHIFT;
        return (int) Math.min(units, u);
    }
}
