package org.apache.spark.shuffle.ucx4j;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Random;

import org.apache.spark.network.buffer.FileSegmentManagedBuffer;
import org.apache.spark.network.buffer.ManagedBuffer;
import org.apache.spark.network.buffer.NioManagedBuffer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.ucx4j.AmMessage;
import org.ucx4j.Endpoint;
import org.ucx4j.Listener;
import org.ucx4j.PooledAllocator;
import org.ucx4j.ProgressMode;
import org.ucx4j.Ucx;
import org.ucx4j.UcxOptions;

/**
 * The block server against hand-made reducers: what it sends to one reducer at once stays within its budget however
 * many requests that reducer makes, a reducer that stops taking data holds up no other, and every block still
 * arrives whole once the reducer goes on.
 */
class BlockServerTest {
    private static final Duration T = Duration.ofSeconds(10);
    private static final int LARGE = 600 * 1024; // mapped (BlockServer.MAP_MIN is 256 KiB)
    private static final int SMALL = 1000; // read into pool memory
    private static final long BUDGET = 1 << 20;

    @TempDir
    Path dir;

    @Test
    void aReducerThatStopsTakingHoldsAtMostTheBudgetAndHoldsUpNoOtherReducer() throws Exception {
        // eight large blocks in one shuffle file, two small ones in memory
        Random random = new Random(42);
        byte[] file = new byte[8 * LARGE];
        random.nextBytes(file);
        File shuffle = Files.write(dir.resolve("shuffle.data"), file).toFile();
        Map<String, byte[]> expected = new HashMap<>();
        Map<String, ManagedBuffer> blocks = new HashMap<>();
        for (int i = 0; i < 8; i++) {
            expected.put("b" + i, java.util.Arrays.copyOfRange(file, i * LARGE, (i + 1) * LARGE));
            blocks.put("b" + i, new FileSegmentManagedBuffer(null, shuffle, (long) i * LARGE, LARGE));
        }
        for (int i = 0; i < 2; i++) {
            byte[] b = new byte[SMALL];
            random.nextBytes(b);
            expected.put("s" + i, b);
            blocks.put("s" + i, new NioManagedBuffer(java.nio.ByteBuffer.wrap(b)));
        }
        try (PooledAllocator pool = new PooledAllocator(1 << 20)) {
            BlockServer server = new BlockServer(blocks::get, 1 << 20, 2, BUDGET, pool);
            try (Ucx executor = Ucx.open(); Listener l = executor.listen(0, server);
                    Ucx stopped = Ucx.open(UcxOptions.defaults().withProgressMode(ProgressMode.CALLER));
                    Ucx healthy = Ucx.open()) {
                // the first reducer progresses only when this thread drives it: it asks for every block, in two
                // requests, then stops
                Endpoint slow = stopped.connect("127.0.0.1", l.port(), T);
                String[][] requests = {{"b0", "b1", "b2", "b3", "s0"}, {"b4", "b5", "b6", "b7", "s1"}};
                for (int r = 0; r < 2; r++) {
                    slow.amSend(Wire.header(Wire.FETCH, r + 1, requests[r].length),
                            String.join("\n", requests[r]).getBytes(StandardCharsets.UTF_8), T);
                }
                Thread.sleep(1000);
                long peak = server.peakBytesInFlight();
                assertTrue(peak > 0 && peak <= BUDGET, "bytes in flight to the stopped reducer: " + peak);
                // meanwhile another reducer is served at once
                Endpoint other = healthy.connect("127.0.0.1", l.port());
                other.amSend(Wire.header(Wire.FETCH, 9, 2), "b7\ns1".getBytes(StandardCharsets.UTF_8));
                for (int k = 0; k < 2; k++) {
                    try (AmMessage m = other.amRecv(Duration.ofSeconds(5))) {
                        Wire.Header h = Wire.Header.parse(m.headerBytes());
                        assertEquals(Wire.BLOCK, h.kind());
                        assertEquals(9, h.requestId());
                        assertArrayEquals(expected.get(h.index() == 0 ? "b7" : "s1"), m.payloadBytes());
                    }
                }
                // the first reducer goes on: all ten blocks arrive whole, the budget held throughout
                boolean[][] seen = new boolean[2][5];
                for (int k = 0; k < 10; k++) {
                    try (AmMessage m = slow.amRecv(T)) {
                        Wire.Header h = Wire.Header.parse(m.headerBytes());
                        assertEquals(Wire.BLOCK, h.kind());
                        int r = (int) h.requestId() - 1;
                        assertTrue(!seen[r][h.index()], "each block once");
                        seen[r][h.index()] = true;
                        assertArrayEquals(expected.get(requests[r][h.index()]), m.payloadBytes(),
                                requests[r][h.index()]);
                    }
                }
                assertTrue(server.peakBytesInFlight() <= BUDGET, "peak " + server.peakBytesInFlight());
                slow.close(T);
                other.close(T);
            }
        }
    }
}
