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
        Report r = new Report(rounds, new long[] {8}, List.of(Measurement.RATE), List.of("ucx4j", "perftest"),
                UcxRuns.Api.TAG);
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

    /** A failed run leaves a hole: the other rounds stay paired, and medians and ratios skip it. */
    @Test
    void aFailedRunIsLeftOutWithoutShiftingTheRoundsAfterIt() {
        Map<String, List<Measurement>> rounds = new LinkedHashMap<>();
        rounds.put(Report.key("ucx4j", Measurement.RATE, 8),
                List.of(rate("ucx4j", 6e6), rate("ucx4j", 12e6), rate("ucx4j", 3e6)));
        rounds.put(Report.key("perftest", Measurement.RATE, 8), List.of(rate("perftest", 10e6),
                Measurement.failed("perftest", Measurement.RATE, 8), rate("perftest", 5e6)));
        Report r = new Report(rounds, new long[] {8}, List.of(Measurement.RATE), List.of("ucx4j", "perftest"),
                UcxRuns.Api.TAG);
        Measurement u = r.get("ucx4j", Measurement.RATE, 8);
        Measurement p = r.get("perftest", Measurement.RATE, 8);
        assertEquals(7.5e6, p.msgsPerS(), "median of the two runs that worked");
        assertEquals(1000, p.iters());
        assertEquals(0.6, r.ratio(u, "perftest"), 1e-9, "rounds 1 and 3, each against its own round");
    }

    /**
     * A get's latency is a round trip, as ucp_get's is: against NIO's one-way figure it compares with twice that;
     * and the JSON names the API measured, not always "tag".
     */
    @Test
    void rmaLatencyComparesRoundTripsAndTheJsonNamesTheApi() {
        Map<String, List<Measurement>> rounds = new LinkedHashMap<>();
        rounds.put(Report.key("ucx4j", Measurement.LATENCY, 8), List.of(lat("ucx4j", 1.0)));
        rounds.put(Report.key("nio", Measurement.LATENCY, 8), List.of(lat("nio", 5.0)));
        rounds.put(Report.key("perftest", Measurement.LATENCY, 8), List.of(lat("perftest", 0.8)));
        Report r = new Report(rounds, new long[] {8}, List.of(Measurement.LATENCY), List.of("ucx4j", "perftest", "nio"),
                UcxRuns.Api.RMA);
        Measurement u = r.get("ucx4j", Measurement.LATENCY, 8);
        assertEquals(0.1, r.ratio(u, "nio"), 1e-9, "1 us get against a 10 us NIO round trip");
        assertEquals(1.25, r.ratio(u, "perftest"), 1e-9, "both round trips");
        @SuppressWarnings("unchecked")
        List<Map<String, Object>> rows = (List<Map<String, Object>>) r.json("test").get("results");
        assertEquals("rma", rows.get(0).get("api"));
        assertEquals("ucp_get", rows.get(2).get("api"));
        assertEquals("socket", rows.get(1).get("api"));
        Report tag = new Report(rounds, new long[] {8}, List.of(Measurement.LATENCY), List.of("ucx4j", "nio"),
                UcxRuns.Api.TAG);
        assertEquals(0.2, tag.ratio(tag.get("ucx4j", Measurement.LATENCY, 8), "nio"), 1e-9, "one way each");
        Report handler = new Report(rounds, new long[] {8}, List.of(Measurement.LATENCY), List.of("ucx4j", "nio"),
                UcxRuns.Api.AM_HANDLER);
        @SuppressWarnings("unchecked")
        List<Map<String, Object>> handlerRows = (List<Map<String, Object>>) handler.json("test").get("results");
        assertEquals("am-handler", handlerRows.get(0).get("api"), "spelled as --api takes it, as send-recv's JSON");
    }

    /**
     * With all three stacks the table also shows the C reference's own ratio to NIO, round by round like the others:
     * the bound any binding's "lower than NIO" figure has on that machine.
     */
    @Test
    void theTableShowsTheReferencesOwnRatioToNio() {
        Map<String, List<Measurement>> rounds = new LinkedHashMap<>();
        rounds.put(Report.key("ucx4j", Measurement.LATENCY, 8), List.of(lat("ucx4j", 0.5), lat("ucx4j", 0.5)));
        rounds.put(Report.key("perftest", Measurement.LATENCY, 8),
                List.of(lat("perftest", 0.4), lat("perftest", 0.4)));
        rounds.put(Report.key("nio", Measurement.LATENCY, 8), List.of(lat("nio", 4.0), lat("nio", 40.0)));
        Report r = new Report(rounds, new long[] {8}, List.of(Measurement.LATENCY), List.of("ucx4j", "perftest", "nio"),
                UcxRuns.Api.TAG);
        java.io.ByteArrayOutputStream bytes = new java.io.ByteArrayOutputStream();
        r.printTable(new java.io.PrintStream(bytes, true, java.nio.charset.StandardCharsets.UTF_8), "test");
        List<String> lines = bytes.toString(java.nio.charset.StandardCharsets.UTF_8).lines().toList();
        String header = lines.stream().filter(l -> l.contains("ucx4j/perftest")).findFirst().orElseThrow();
        assertTrue(header.trim().endsWith("ucx4j/perftest    ucx4j/nio   perftest/nio"), header);
        String row = lines.stream().filter(l -> l.trim().startsWith("8 B")).findFirst().orElseThrow();
        // per round 0.1x and 0.01x against NIO: the median of the two
        assertTrue(row.trim().endsWith("1.25x        0.07x          0.06x"), row);
        Report noReference = new Report(rounds, new long[] {8}, List.of(Measurement.LATENCY),
                List.of("ucx4j", "nio"), UcxRuns.Api.TAG);
        bytes.reset();
        noReference.printTable(new java.io.PrintStream(bytes, true, java.nio.charset.StandardCharsets.UTF_8), "t");
        assertTrue(!bytes.toString(java.nio.charset.StandardCharsets.UTF_8).contains("perftest/nio"));
    }

    /** The machine line names Linux's idle driver, and the halt-polling window where the driver has one. */
    @Test
    void theMachineLineNamesTheIdleDriverWhereLinuxHasOne() throws Exception {
        java.nio.file.Path driver = java.nio.file.Path.of("/sys/devices/system/cpu/cpuidle/current_driver");
        String idle = Report.cpuIdle();
        assertTrue(Report.machine().endsWith(idle), Report.machine());
        if (!java.nio.file.Files.isReadable(driver)) {
            assertEquals("", idle);
            return;
        }
        String name = java.nio.file.Files.readString(driver).trim();
        assertTrue(idle.startsWith(", cpuidle " + name), idle);
        java.nio.file.Path window = java.nio.file.Path.of("/sys/module/haltpoll/parameters/guest_halt_poll_ns");
        if (name.equals("haltpoll") && java.nio.file.Files.isReadable(window)) {
            assertTrue(idle.endsWith("(guest halt polling up to " + java.nio.file.Files.readString(window).trim()
                    + " ns)"), idle);
        }
    }

    private static Measurement lat(String stack, double p50) {
        return new Measurement(stack, Measurement.LATENCY, 8, 1000, p50, p50, p50, Double.NaN, Double.NaN);
    }
}
