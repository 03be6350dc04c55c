package org.ucx4j.cli;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.Test;

/** The sweep's ratios pair the stacks round by round; medians per stack stay per-stack medians. */
class ReportTest {
    private static Measurement rate(String stack, double msgsPerS) {
        return new Measurement(stack, Measurement.RATE, 8, 1000, Double.NaN, Double.NaN, Double.NaN, Double.NaN,
                msgsPerS);
    }

    @Test
    void theRatioIsTheMedianOfPerRoundRatiosNotTheRatioOfMedians() {
        // the machine slows down over the run: both stacks drop together, ucx4j is always 0.6x of perftest
        Map<String, List<Measurement>> rounds = new LinkedHashMap<>();
        rounds.put(Report.key("ucx4j", Measurement.RATE, 8),
                List.of(rate("ucx4j", 6e6), rate("ucx4j", 12e6), rate("ucx4j", 3e6)));
        rounds.put(Report.key("perftest", Measurement.RATE, 8),
                List.of(rate("perftest", 18e6), rate("perftest", 20e6), rate("perftest", 5e6)));
        Report r = new Report(rounds, new long[] {8}, List.of(Measurement.RATE), List.of("ucx4j", "perftest"));
        Measurement u = r.get("ucx4j", Measurement.RATE, 8);
        assertEquals(6e6, u.msgsPerS(), "per-stack median");
        assertEquals(18e6, r.get("perftest", Measurement.RATE, 8).msgsPerS());
        assertArrayEquals(new double[] {6.0 / 18, 0.6, 0.6}, r.roundRatios(u, "perftest"), 1e-9);
        assertEquals(0.6, r.ratio(u, "perftest"), 1e-9, "median of the paired ratios");
        assertEquals(6.0 / 18, r.ratioOfMedians(u, "perftest"), 1e-9);
        assertTrue(Double.isNaN(r.ratio(u, "nio")), "no NIO figures: no ratio");
        @SuppressWarnings("unchecked")
        Map<String, Object> row = ((List<Map<String, Object>>) r.json("test").get("results")).getFirst();
        assertEquals(0.6, (Double) row.get("ratio_to_perftest"), 1e-9);
        assertEquals(6.0 / 18, (Double) row.get("ratio_of_medians_to_perftest"), 1e-9);
        assertEquals(3, ((List<?>) row.get("round_ratios_to_perftest")).size());
    }
}
