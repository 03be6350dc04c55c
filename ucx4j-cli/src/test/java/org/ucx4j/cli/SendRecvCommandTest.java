package org.ucx4j.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import picocli.CommandLine;

/**
 * {@code ucx4j bench send-recv}: its JSON (the fields the README promises), the per-peer figures after a bandwidth
 * run, bad arguments refused in one line before anything starts, and ucx_perftest's output read in 10^6-byte MB.
 */
@org.junit.jupiter.api.Timeout(300)
class SendRecvCommandTest {
    /** Runs the command in this JVM; returns {exit status, stderr}. */
    private static Object[] runHere(String... args) {
        StringWriter err = new StringWriter();
        CommandLine cl = Main.commandLine();
        cl.setErr(new PrintWriter(err, true));
        int status = cl.execute(args);
        return new Object[] {status, err.toString()};
    }

    @Test
    void badArgumentsAreRefusedInOneLineBeforeAnythingStarts() {
        String[][] cases = {
            {"--api", "foo", "--api must be tag, am, am-handler, stream or rma, got foo"},
            {"--size", "128m", "--size must be 0 to 64m"},
            {"--iters", "0", "--iters and --window must be positive"},
            {"--warmup", "-1", "--warmup not negative"},
            {"--mode", "fast", "--mode must be latency or bandwidth, got fast"},
            {"--format", "yaml", "--format must be table or json, got yaml"},
            {"--transport", "rdma", "--transport must be auto, shm or tcp"},
            {"--progress", "spin", "--progress: caller, thread, backoff, blocking or polling, not spin"},
            {"--error-handling", "some", "--error-handling must be peer or none, got some"},
            {"--client", "localhost:abc", "--client takes HOST:PORT, got localhost:abc"},
            {"--size", "8x", "not a size"},
            {"--iters", "abc", "Invalid value for option '--iters'"},
            {"--no-such", "1", "Unknown option"},
            {"--api", "stream", "--size", "0", "--api stream needs a size of at least 1 byte"},
        };
        for (String[] c : cases) {
            assertRefused("send-recv", c);
        }
        String[][] sweep = {
            {"--plot", "out.pdf", "--sizes", "8", "--plot needs a .png or .svg file name"},
            {"--sizes", "0,8", "sizes must be positive: 0"},
            // a spinning progress thread on each side would take the cores the other stacks measure on
            {"--progress", "polling", "--stacks", "ucx4j,nio", "--progress polling keeps a thread spinning"},
            // each of these once failed only after a JVM had started, or after the whole run, or ran twice
            {"--pull-budget", "lots", "not a size"},
            {"--json", "/no/such/dir/out.json", "--json: no writable directory /no/such/dir"},
            {"--plot", "/no/such/dir/out.png", "--plot: no writable directory /no/such/dir"},
            {"--window", "100000000", "--window must be 1 to 65536"},
            {"--scale", "1e30", "--scale above 0 and at most 1000"},
            {"--sizes", "8,64,8", "--sizes names a value twice"},
            {"--modes", "latency,latency", "--modes names a value twice"},
            {"--modes", "rate", "--sizes", "4k", "nothing to run: rate mode runs only sizes up to 1 KiB"},
            {"--stacks", "ucx4j,tcp", "unknown stack tcp"},
        };
        for (String[] c : sweep) {
            assertRefused("sweep", c);
        }
    }

    /** {@code bench COMMAND} with {@code c}'s arguments (all but its last) exits 2 with one line holding its last. */
    private static void assertRefused(String command, String[] c) {
        String[] args = java.util.Arrays.copyOf(c, c.length - 1);
        Object[] r = runHere(java.util.stream.Stream.concat(java.util.stream.Stream.of("bench", command),
                java.util.Arrays.stream(args)).toArray(String[]::new));
        String err = (String) r[1];
        String what = command + " " + String.join(" ", args) + ": " + err;
        assertEquals(2, r[0], what);
        assertTrue(err.startsWith("ucx4j: ") && err.contains(c[c.length - 1]), what);
        assertEquals(1, err.strip().lines().count(), "one line, no stack trace: " + err);
    }

    /**
     * A spawned benchmark server ends with its client's process even when that one is killed outright (no shutdown
     * hook runs) before it connected: no endpoint's failure can tell the server then, and it would wait for that
     * client forever (send-recv's) or for a minute (sweep's).
     */
    @Test
    void aSpawnedServerEndsWhenItsClientIsKilledOutrightBeforeConnecting() throws Exception {
        for (String[] cmd : new String[][] {
            {"bench", "send-recv", "--iters", "1000", "--warmup", "0"},
            {"bench", "sweep", "--stacks", "ucx4j", "--sizes", "8", "--modes", "latency"},
        }) {
            Process client = new ProcessBuilder(Main.selfCommand(cmd)).redirectErrorStream(true)
                    .redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
            try {
                ProcessHandle server = null;
                for (long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
                        server == null && System.nanoTime() < deadline; ) {
                    server = client.children().findFirst().orElse(null);
                    Thread.sleep(5);
                }
                assertTrue(server != null, "the client started its server: " + String.join(" ", cmd));
                // at once: the server's JVM is still starting, so the client cannot have connected yet
                client.destroyForcibly(); // SIGKILL: the client's shutdown hook, which kills its children, never runs
                assertTrue(client.waitFor(30, TimeUnit.SECONDS));
                boolean ended = server.onExit().completeOnTimeout(null, 30, TimeUnit.SECONDS).join() != null;
                if (!ended) {
                    server.destroyForcibly();
                }
                assertTrue(ended, "the server ended with its client: " + String.join(" ", cmd));
            } finally {
                client.destroyForcibly();
            }
        }
    }

    private static JsonNode runJson(String... args) throws Exception {
        ProcessBuilder pb = new ProcessBuilder(Main.selfCommand(args)).redirectError(ProcessBuilder.Redirect.INHERIT);
        Process p = pb.start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(p.waitFor(120, TimeUnit.SECONDS), "ended");
        assertEquals(0, p.exitValue(), out);
        String json = out.lines().filter(l -> l.startsWith("{")).reduce((a, b) -> b).orElseThrow(
                () -> new AssertionError("no JSON line in: " + out));
        return new ObjectMapper().readTree(json);
    }

    @Test
    void latencyAndBandwidthRunsReportTheirFiguresAsJson() throws Exception {
        JsonNode lat = runJson("bench", "send-recv", "--size", "8", "--iters", "2000", "--warmup", "0", "--format",
                "json");
        assertEquals("latency", lat.get("mode").asText());
        assertEquals(8, lat.get("size").asLong());
        assertEquals(2000, lat.get("iters").asLong());
        double p50 = lat.get("p50_us").asDouble(), p99 = lat.get("p99_us").asDouble();
        assertTrue(p50 > 0 && p99 >= p50, lat.toString());
        assertTrue(lat.get("mean_us").asDouble() > 0 && lat.get("mbps").asDouble() > 0, lat.toString());
        // one message per mean one-way time: the rate and the mean are one figure
        assertEquals(1e6 / lat.get("mean_us").asDouble(), lat.get("msgs_per_s").asDouble(),
                1e-6 * lat.get("msgs_per_s").asDouble(), lat.toString());
        assertFalse(lat.get("lanes").asText().isEmpty(), lat.toString());

        JsonNode bw = runJson("bench", "send-recv", "--mode", "bandwidth", "--size", "1m", "--iters", "64",
                "--warmup", "0", "--format", "json");
        assertEquals("bandwidth", bw.get("mode").asText());
        assertEquals(1 << 20, bw.get("size").asLong());
        assertTrue(bw.get("mbps").asDouble() > 0, bw.toString());
        // 64 sends of 1 MiB: the endpoint's per-peer figures count them (transfers >= 1 MB)
        String stats = bw.get("peer_stats").asText();
        assertTrue(stats.matches("\\d+ MB/s \\d+ MB/s \\d+ MB/s \\(\\d+ bytes\\)"), stats);
    }

    @Test
    void activeMessagesTakenByTheServersHandlerAreAllCounted() throws Exception {
        // the server counts the messages in its handler and acknowledges the last: a lost or uncounted one would
        // leave the client waiting (the run would fail), and a ping without its pong would stall the ping-pong
        for (String progress : new String[] {"caller", "blocking"}) { // the handler on the caller, then on the
            JsonNode lat = runJson("bench", "send-recv", "--api", "am-handler", "--size", "8", "--iters", "500",
                    "--warmup", "0", "--progress", progress, "--format", "json"); // worker's own thread
            assertEquals("am-handler", lat.get("api").asText(), lat.toString());
            assertEquals(500, lat.get("iters").asLong());
            assertTrue(lat.get("p50_us").asDouble() > 0, lat.toString());
            JsonNode bw = runJson("bench", "send-recv", "--api", "am-handler", "--mode", "bandwidth", "--size", "1m",
                    "--iters", "64", "--warmup", "0", "--progress", progress, "--format", "json");
            assertEquals("am-handler", bw.get("api").asText(), bw.toString());
            assertTrue(bw.get("mbps").asDouble() > 0, bw.toString());
        }
    }

    @Test
    void perftestFiguresAreReadInMegabytesOfAMillionBytes() {
        // ucx_perftest 1.13's final line: iterations, 50th percentile, average and overall latency (us), average and
        // overall bandwidth (MB/s of 2^20 bytes), average and overall message rate
        String line = "Final:                  2000      3.109     3.152     3.152    19825.60   19825.60      317210"
                + "      317210";
        Measurement bw = PerftestRuns.parse(line, Measurement.BANDWIDTH, 65536);
        assertEquals(2000, bw.iters());
        assertEquals(19825.60 * 1.048576, bw.mbps(), 1e-6);
        assertEquals(3.152, bw.meanUs(), 1e-9);
        assertTrue(Double.isNaN(bw.p50Us()));
        Measurement lat = PerftestRuns.parse("Final: 2000 0.456 0.466 0.466 16.36 16.36 2143779 2143779",
                Measurement.LATENCY, 8);
        assertEquals(0.456, lat.p50Us(), 1e-9);
        assertEquals(0.466, lat.meanUs(), 1e-9);
    }
}
