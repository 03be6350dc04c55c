package org.ucx4j.internal.engine;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.function.Predicate;
import org.junit.jupiter.api.Test;

/**
 * The ring of operations posted without a callback: tested oldest first up to the first still in flight, every
 * entry when asked, each completed one taken off by its completion, and entries keep their places as it grows.
 */
class PolledRingTest {
    private final PolledRing ring = new PolledRing();
    /** What UCX has finished: a test of one of these completes it (which takes it off, as a completion does). */
    private final Set<Op> finished = new HashSet<>();
    private final List<Op> tested = new ArrayList<>();
    private final List<Op> completed = new ArrayList<>();
    private final Predicate<Op> poll = op -> {
        tested.add(op);
        if (!finished.contains(op)) {
            return false;
        }
        completed.add(op);
        ring.remove(op);
        return true;
    };

    private List<Op> add(int n) {
        List<Op> ops = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            Op op = new Op(Runnable::run);
            ring.add(op);
            ops.add(op);
        }
        return ops;
    }

    @Test
    void inOrderCompletionsCostOneTestBeyondThemAndStopAtTheFirstInFlight() {
        List<Op> ops = add(5);
        finished.addAll(ops.subList(0, 3));
        assertEquals(3, ring.test(false, poll));
        assertEquals(ops.subList(0, 3), completed);
        assertEquals(ops.subList(0, 4), tested, "the fourth, still in flight, ends the scan");
        assertFalse(ring.isEmpty());
        finished.addAll(ops.subList(3, 5));
        assertEquals(2, ring.test(false, poll));
        assertTrue(ring.isEmpty());
    }

    @Test
    void aYoungerOneFinishedBehindAnOlderInFlightIsFoundOnlyByTheTestOfAll() {
        List<Op> ops = add(4);
        finished.add(ops.get(2));
        assertEquals(0, ring.test(false, poll));
        assertEquals(List.of(ops.get(0)), tested);
        assertEquals(1, ring.test(true, poll));
        assertEquals(List.of(ops.get(2)), completed);
        // the older ones finish later: the head moves past the gap the younger one left
        finished.add(ops.get(0));
        finished.add(ops.get(1));
        assertEquals(2, ring.test(false, poll));
        assertFalse(ring.isEmpty(), "the fourth is still in flight");
        finished.add(ops.get(3));
        assertEquals(1, ring.test(false, poll));
        assertTrue(ring.isEmpty());
    }

    @Test
    void growingWithEntriesInFlightKeepsEachInItsPlaceAndRemovalsWork() {
        List<Op> first = add(50);
        finished.addAll(first.subList(0, 40));
        assertEquals(40, ring.test(false, poll)); // the head has moved: indices 40.. wrap past the first array
        List<Op> more = add(200); // 10 + 200 in flight: the ring grows twice with the head not at 0
        ring.remove(more.get(7)); // taken off in the middle (a canceled or failed one)
        ring.remove(first.get(45));
        List<Op> all = new ArrayList<>(first.subList(40, 50));
        all.addAll(more);
        finished.addAll(all);
        completed.clear();
        int done = ring.test(false, poll);
        List<Op> expected = new ArrayList<>(all);
        expected.remove(more.get(7));
        expected.remove(first.get(45));
        assertEquals(expected.size(), done);
        assertEquals(expected, completed, "oldest first, each once");
        assertTrue(ring.isEmpty());
    }

    @Test
    void removingTheHeadAdvancesPastEveryRemovedEntryAndClearForgetsAll() {
        List<Op> ops = add(6);
        ring.remove(ops.get(1));
        ring.remove(ops.get(2));
        ring.remove(ops.get(0));
        finished.add(ops.get(3));
        assertEquals(1, ring.test(false, poll));
        assertEquals(List.of(ops.get(3), ops.get(4)), tested, "the removed ones are not tested");
        ring.remove(ops.get(3)); // already off: nothing happens
        ring.clear();
        assertTrue(ring.isEmpty());
        tested.clear();
        assertEquals(0, ring.test(true, poll));
        assertTrue(tested.isEmpty());
    }
}
