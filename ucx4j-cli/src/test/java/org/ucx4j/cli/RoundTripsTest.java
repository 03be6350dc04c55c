package org.ucx4j.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * The latency loops' bookkeeping: round trips kept in an array and folded afterwards give the same one-way figures
 * a histogram filled in the loop gave; a child's output after the line awaited is drained, not left in the pipe;
 * ucx_perftest's UCX version read from {@code ucx_info -v}.
 */
class RoundTripsTest {
    @Test
    void oneWayFiguresAreHalfTheRoundTrips() {
        RoundTrips t = new RoundTrips(8, 2);
        for (long nanos : new long[] {1000, 2000, 3000, 10_000}) {
            assertFalse(t.add(nanos));
        }
        Measurement m = t.measurement("x", 8);
        assertEquals(4, m.iters());
        assertEquals(1.0, m.p50Us(), 0.01, "the median round trip (2000 ns, of the lower half) over two");
        assertEquals(5.0, m.p99Us(), 0.01);
        assertEquals(2.0, m.meanUs(), 1e-9, "16000 ns over 4 round trips over 2");
        RoundTrips gets = new RoundTrips(1, 1);
        gets.add(700);
        assertEquals(0.7, gets.measurement("x", 8).p50Us(), 0.001, "an RMA get is timed whole");
    }

    @Test
    void aFullArrayAsksForAFoldAndNoTimeIsLost() {
        long iters = 70_000;
        RoundTrips t = new RoundTrips(iters, 2);
        int folds = 0;
        for (long i = 0; i < iters; i++) {
            if (t.add(400)) {
                t.fold();
                folds++;
            }
        }
        assertEquals(1, folds, "an array of 65536 times fills once in 70000");
        Measurement m = t.measurement("x", 8);
        assertEquals(iters, m.iters());
        assertEquals(0.2, m.meanUs(), 1e-9);
        assertEquals(0.2, m.p50Us(), 0.001);
    }

    @Test
    void aChildsOutputAfterTheAwaitedLineIsDrained() throws Exception {
        // 2 MB after the line, far beyond a pipe's 64 KiB: left unread, the child would block on its write forever
        Process p = new ProcessBuilder("sh", "-c", "echo 'UCX warning'; echo 'PORTS 1 2';"
                + " head -c 2000000 /dev/zero | tr '\\0' x | fold -w 100").start();
        ByteArrayOutputStream others = new ByteArrayOutputStream();
        try {
            String line = Children.awaitLine(p, "PORTS ", Duration.ofSeconds(30),
                    new PrintStream(others, true, StandardCharsets.UTF_8));
            assertEquals("PORTS 1 2", line);
            assertTrue(p.waitFor(30, TimeUnit.SECONDS), "the child wrote all its output and ended");
            for (long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
                    others.size() < 2_020_000 && System.nanoTime() < deadline; ) {
                Thread.sleep(10);
            }
            String text = others.toString(StandardCharsets.UTF_8);
            assertTrue(text.startsWith("UCX warning\n"), "lines before it are shown too");
            assertEquals(2_000_000, text.chars().filter(c -> c == 'x').count(), "every byte after it went on");
        } finally {
            p.destroyForcibly();
        }
    }

    @Test
    void perftestsUcxVersionIsReadFromUcxInfo() {
        assertEquals("1.20.1", PerftestRuns.versionOf(
                "# Library version: 1.20.1\n# Library path: /usr/lib/libucs.so.0\n# API headers version: 1.20.1\n"));
        assertEquals("1.13.1", PerftestRuns.versionOf("# Version 1.13.1\n# Git branch '<unknown>'"));
        assertEquals(null, PerftestRuns.versionOf("ucx_info: not found"));
    }
}
