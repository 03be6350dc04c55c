package org.ucx4j.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.Test;

/**
 * The sweep's round order is fair: over 2n rounds of n stacks each stack runs in each position, and directly after
 * each other stack, equally often. With a plain rotation ucx4j always ran right after NIO and ucx_perftest right
 * after ucx4j, so whatever a run left behind always fell on the same stack.
 */
class SweepOrderTest {
    @Test
    void threeStacksOverSixRoundsBalancePositionsAndPredecessors() {
        List<String> stacks = List.of("ucx4j", "perftest", "nio");
        Map<String, Integer> positions = new HashMap<>();
        Map<String, Integer> follows = new HashMap<>();
        for (int r = 0; r < 6; r++) {
            List<String> order = SweepBench.roundOrder(stacks, r);
            assertEquals(3, order.stream().distinct().count(), "each stack once per round: " + order);
            for (int k = 0; k < order.size(); k++) {
                positions.merge(order.get(k) + "@" + k, 1, Integer::sum);
                if (k > 0) {
                    follows.merge(order.get(k - 1) + ">" + order.get(k), 1, Integer::sum);
                }
            }
        }
        assertEquals(9, positions.size(), positions.toString());
        positions.values().forEach(n -> assertEquals(2, n, positions.toString()));
        assertEquals(6, follows.size(), "every ordered pair of stacks occurs: " + follows);
        follows.values().forEach(n -> assertEquals(2, n, follows.toString()));
    }

    @Test
    void twoStacksAlternate() {
        List<String> stacks = List.of("ucx4j", "perftest");
        assertEquals(List.of("ucx4j", "perftest"), SweepBench.roundOrder(stacks, 0));
        assertEquals(List.of("perftest", "ucx4j"), SweepBench.roundOrder(stacks, 1));
        assertEquals(List.of("perftest", "ucx4j"), SweepBench.roundOrder(stacks, 2));
        assertEquals(List.of("ucx4j", "perftest"), SweepBench.roundOrder(stacks, 3));
    }

    /**
     * A Java stack's run limit counts messages as well as bytes: at the largest {@code --scale} the 8 B NIO rate
     * run (10^8 messages, ~4.4 us each on the headline VM) must not be killed (it was given 120 s + bytes only).
     */
    @Test
    void aRunsTimeLimitCountsItsMessages() {
        long messages = 1_000_000L * 1000 / 10; // the rate run's count at --scale 1000, NIO's tenth of it
        long expectedSeconds = messages * 44 / 10_000_000; // 4.4 us a message
        assertEquals(true, SweepBench.limitSeconds(120, 8, messages) > 5 * expectedSeconds,
                "limit " + SweepBench.limitSeconds(120, 8, messages) + " s for a run of ~" + expectedSeconds + " s");
        assertEquals(120 + 62, SweepBench.limitSeconds(120, 4 << 20, 150)); // bytes still count: 629 MB at 10 MB/s
    }
}
