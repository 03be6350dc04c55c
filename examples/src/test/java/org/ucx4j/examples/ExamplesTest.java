package org.ucx4j.examples;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Arrays;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.ucx4j.Listener;
import org.ucx4j.ProgressMode;
import org.ucx4j.Ucx;
import org.ucx4j.UcxOptions;
import org.ucx4j.WorkerAddress;

/** The examples run as documented and check their own results. */
class ExamplesTest {
    private static UcxOptions quiet() { // no busy progress threads on a 2-core machine
        return UcxOptions.defaults().withProgressMode(ProgressMode.BLOCKING);
    }

    @Test
    void echoServerSendsEveryObjectBackUnchanged() {
        try (Ucx server = Ucx.open(quiet()); Ucx client = Ucx.open(quiet()); Listener l = Echo.serve(server, 0)) {
            long bytes = Echo.run(client, "127.0.0.1", l.port(), 40); // four of them up to 1 MiB: rendezvous
            assertTrue(bytes > 0);
            assertEquals(bytes, Echo.run(client, "127.0.0.1", l.port(), 0) + bytes, "a second client is served");
        }
    }

    @Test
    void workersThatKnowOnlyEachOthersAddressPingPong() throws Exception {
        try (Ucx a = Ucx.open(quiet()); Ucx b = Ucx.open(quiet())) {
            CompletableFuture<WorkerAddress> published = new CompletableFuture<>();
            CompletableFuture<Void> served = CompletableFuture.runAsync(
                    () -> AddressPingPong.serve(a, 500, published::complete));
            long[] ns = AddressPingPong.ping(b, published.get(10, TimeUnit.SECONDS), 500); // checks every pong
            served.get(30, TimeUnit.SECONDS);
            assertEquals(500, ns.length);
            assertTrue(Arrays.stream(ns).allMatch(t -> t > 0));
        }
    }

    @Test
    void theTourRunsEveryStepAndChecksWhatArrived() throws Exception {
        var text = new java.io.ByteArrayOutputStream();
        int steps = Tour.run(quiet(), new java.io.PrintStream(text, true, java.nio.charset.StandardCharsets.UTF_8));
        String out = text.toString(java.nio.charset.StandardCharsets.UTF_8);
        assertEquals(11, steps, out);
        assertTrue(out.contains("3. tags: tag 2 -> 'second', tag 1 -> 'first'"), out);
        assertTrue(out.contains("7. stream: 'hello, stream'"), out);
        assertTrue(out.contains("10. peer gone: ConnectionResetException"), out);
        assertTrue(out.contains("11. worker address"), out);
    }

    @Test
    void jacobiOnSeveralRanksReproducesTheSerialSolutionBitForBit() throws Exception {
        int rows = 50, cols = 40, iterations = 60;
        double[] serial = Jacobi.serial(rows, cols, iterations);
        assertTrue(serial[3 * cols + cols / 2] > 0, "heat reached row 3: halos carry information");
        for (int ranks : new int[] {1, 3, 5}) {
            Jacobi.Result r = Jacobi.run(ranks, rows, cols, iterations, ProgressMode.BLOCKING);
            assertArrayEquals(serial, r.grid(), ranks + " ranks");
        }
        // a wrong halo would show: the same run with too few iterations differs
        assertFalse(Arrays.equals(serial, Jacobi.serial(rows, cols, iterations - 1)));
    }
}
