package org.ucx4j.internal.engine;

import java.util.Arrays;
import java.util.function.Predicate;

/**
 * Operations posted to UCX without a callback, in posting order, for whoever drives the worker to test: oldest
 * first, up to the first one still in flight (operations that mostly complete in posting order cost one test per
 * progress call that way), or all of them. No upcall per operation, and no allocation once the ring is big enough.
 * Owner thread only.
 * <p>
 * Indices only grow (mod 2^32): entry {@code i} lives at {@code i & (length - 1)}, and an operation keeps its index
 * for life ({@link Op#ringIndex}), so taking one off is O(1) and a scan stays valid when the ring grows under it.
 * {@code tail - head} entries from {@code head}; removed ones are null.
 */
final class PolledRing {
    private Op[] ring = new Op[64];
    private int head, tail;

    boolean isEmpty() {
        return head == tail;
    }

    void add(Op op) {
        if (tail - head == ring.length) {
            Op[] bigger = new Op[ring.length * 2];
            for (int i = head; i != tail; i++) { // same indices, wider mask
                bigger[i & (bigger.length - 1)] = ring[i & (ring.length - 1)];
            }
            ring = bigger;
        }
        op.ringIndex = tail;
        ring[tail++ & (ring.length - 1)] = op;
    }

    /** Takes {@code op} off if it is in the ring (its index says where). */
    void remove(Op op) {
        int mask = ring.length - 1;
        int i = op.ringIndex;
        if (i - head >= 0 && tail - i > 0 && ring[i & mask] == op) {
            ring[i & mask] = null;
        }
        while (head != tail && ring[head & mask] == null) {
            head++;
        }
    }

    /**
     * Completes what UCX is done with: {@code poll} tests one operation and, when it completed, finishes it (which
     * takes it off through {@link #remove}); from the oldest on up to the first still in flight, then, with
     * {@code all}, every other one too. How many completed.
     */
    int test(boolean all, Predicate<Op> poll) {
        int done = 0;
        while (head != tail) {
            Op op = ring[head & (ring.length - 1)];
            int at = op.ringIndex;
            if (!poll.test(op)) {
                break;
            }
            if (op.ringIndex == at) { // (its completion took it off; should one ever not, it is not tested again)
                remove(op);
            } // else it was reused and added again meanwhile: that entry stays
            done++;
        }
        if (all) {
            for (int i = tail - 1; i - head > 0; i--) { // the head was just tested
                Op op = ring[i & (ring.length - 1)];
                if (op != null && poll.test(op)) {
                    done++;
                }
            }
        }
        return done;
    }

    /** Adds the entries of endpoint {@code ep} to {@code into}, oldest first. */
    void collect(EndpointCore ep, java.util.List<Op> into) {
        for (int i = head; i != tail; i++) {
            Op op = ring[i & (ring.length - 1)];
            if (op != null && op.ep == ep) {
                into.add(op);
            }
        }
    }

    /** Forgets every entry (the worker is destroyed: what was in flight is finished otherwise). */
    void clear() {
        Arrays.fill(ring, null);
        head = tail = 0;
    }
}
