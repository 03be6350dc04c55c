package org.ucx4j.internal.engine;

import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.LockSupport;

/**
 * Lending an {@link Engine}'s worker to a thread that waits (progress-thread modes): instead of waiting to be woken,
 * a thread about to wait for an operation takes the worker from the progress thread and drives it itself, as in
 * caller mode, so a completion costs no hand-off between threads (docs/internals.md, "Worker lending").
 *
 * <p>States: RUNNING, the progress thread owns the worker. REQUESTED: {@link #borrower} asked for it; the progress
 * thread hands it over at the top of its next duty cycle ({@link #lend}). LENT: the borrower owns it (the engine's
 * {@code owner}). RETURNED: nobody drives it; the progress thread (parked) takes it back when it wakes, unless a
 * borrower takes it first.
 */
final class Lending {
    /** Kill switch for {@link #borrow}: {@code -Ducx4j.lend=false}. */
    static final boolean ENABLED = !"false".equals(System.getProperty("ucx4j.lend"));
    private static final int RUNNING = 0, REQUESTED = 1, LENT = 2, RETURNED = 3;
    /** How long the progress thread naps between checks while the worker is lent or returned. */
    private static final long LENT_NAP_NANOS = TimeUnit.MILLISECONDS.toNanos(1);
    /** A borrower's wait for the hand-over: spins, then naps (the progress thread unparks it). */
    private static final int GRANT_SPINS = 64;
    private static final long GRANT_PARK_NANOS = TimeUnit.MICROSECONDS.toNanos(50);
    /** How long a borrower waits for the hand-over before it goes the ordinary way (a duty cycle takes µs). */
    private static final long GRANT_MAX_NANOS = TimeUnit.MILLISECONDS.toNanos(20);

    private final Engine engine;
    private final AtomicInteger state = new AtomicInteger(RUNNING);
    /**
     * The thread waiting for the progress thread to hand the worker over (REQUESTED; taken with a CAS: one at a
     * time, others wait the ordinary way). A worker nobody drives (RETURNED) is taken without it.
     */
    private final AtomicReference<Thread> borrower = new AtomicReference<>();

    Lending(Engine engine) {
        this.engine = engine;
    }

    /** A thread asked for the worker: the progress thread hands it over ({@link #lend}) before its next duty. */
    boolean requested() {
        return state.get() == REQUESTED;
    }

    /** Nobody drives the worker now: given back by a borrower, not yet taken back by the (parked) progress thread. */
    boolean returned() {
        return state.get() == RETURNED;
    }

    /**
     * The calling thread takes the worker from the progress thread; true when it owns it now ({@link #giveBack} when
     * done). Without {@code wait}, only a worker nobody drives now is taken, with no hand-over to wait for.
     */
    boolean borrow(boolean wait) {
        return borrow(wait, Long.MAX_VALUE);
    }

    /**
     * {@link #borrow(boolean)} for a call with a deadline ({@code System.nanoTime()} based; {@code Long.MAX_VALUE}:
     * none): the wait for the hand-over ends by it too, so a short timeout is never stretched to the hand-over's
     * own bound.
     */
    boolean borrow(boolean wait, long deadline) {
        Thread progressThread = engine.progressThread();
        if (!ENABLED || progressThread == null || engine.stopRequested) {
            return false;
        }
        Thread me = Thread.currentThread();
        int s = state.get();
        if (s == RETURNED) {
            // nobody drives it (the progress thread has not taken it back): one CAS, no hand-over. The owner field
            // needs no fence: only the thread it names acts on it, and that thread reads its own write
            if (!state.compareAndSet(RETURNED, LENT)) {
                return false; // another borrower, or the progress thread, was first: the ordinary way
            }
            engine.ownerRelease(me);
            noteBorrower(me);
            return true;
        }
        if (!wait || s != RUNNING || !borrower.compareAndSet(null, me)) {
            return false;
        }
        noteBorrower(me);
        if (!state.compareAndSet(RUNNING, REQUESTED)) {
            borrower.set(null);
            return false;
        }
        engine.wakeIfSleeping(); // out of its nap, to hand over
        // the progress thread hands over at the top of its next duty cycle and then unparks this thread: a short
        // spin, then park, so that a waiter spinning on a busy machine does not keep it off the CPU
        long parkedSince = 0;
        for (int spins = 0; !engine.isOwnerThread(); spins++) {
            if (spins < GRANT_SPINS) {
                Thread.onSpinWait();
            } else {
                if (parkedSince == 0) {
                    parkedSince = System.nanoTime();
                }
                // a progress thread stuck in a duty cycle (a handler that blocks, say) or a closing worker never
                // hands over, and an interrupt makes park return at once: withdraw the request (unless the hand-
                // over won the race) and go the ordinary way, whose wait keeps the caller's deadline
                long now = System.nanoTime();
                if ((engine.stopRequested || engine.isTerminated() || me.isInterrupted()
                        || now - parkedSince > GRANT_MAX_NANOS
                        // past the call's deadline, after one nap at least (a hand-over takes microseconds)
                        || deadline != Long.MAX_VALUE && now - deadline >= 0 && now - parkedSince >= GRANT_PARK_NANOS)
                        && state.compareAndSet(REQUESTED, RUNNING)) {
                    borrower.set(null);
                    return false;
                }
                LockSupport.parkNanos(this, GRANT_PARK_NANOS);
            }
        }
        return true;
    }

    /**
     * Records the borrower for tests; written only when it changes, so that threads borrowing in a loop do not keep
     * writing one shared cache line.
     */
    private static void noteBorrower(Thread me) {
        if (TestHooks.lastBorrower != me) {
            TestHooks.lastBorrower = me;
        }
    }

    /**
     * The borrower hands the worker back; {@code wanted}: the progress thread is unparked to resume (work it must
     * do, decided while the borrower still owned the worker's state), as it is when anything is queued.
     */
    void giveBack(boolean wanted) {
        Thread progressThread = engine.progressThread();
        engine.ownerRelease(progressThread);
        if (borrower.getPlain() == Thread.currentThread()) { // this loan was handed over (see borrow)
            borrower.setRelease(null);
        }
        // the one fence: a thread that queues an op either sees RETURNED (and wakes the progress thread) or
        // queued it before the check below
        state.set(RETURNED);
        if (wanted || engine.stopRequested || engine.anyQueued()) { // the queue after the hand-back: see submit
            LockSupport.unpark(progressThread);
        }
    }

    /**
     * Progress thread, at the top of a duty cycle with a borrow request: hands the worker over and waits until it is
     * given back; false when the request was withdrawn meanwhile.
     */
    boolean lend() {
        // LENT before the owner: the borrower may give the worker back the moment it sees itself owner; a CAS, as a
        // borrower that saw the worker closing may have withdrawn its request meanwhile
        if (!state.compareAndSet(REQUESTED, LENT)) {
            return false;
        }
        Thread b = borrower.get(); // set before the request
        engine.setOwner(b); // everything done so far is visible to the borrower
        LockSupport.unpark(b);
        while (true) {
            // the progress thread owns its interrupt flag: one left set (by a handler, say) would turn these naps
            // into a spin beside the borrower's for as long as the loan lasts
            Thread.interrupted();
            LockSupport.parkNanos(this, LENT_NAP_NANOS);
            if (state.get() == RETURNED && state.compareAndSet(RETURNED, RUNNING)) {
                return true; // the borrower set owner back before it returned the worker
            }
        }
    }
}
