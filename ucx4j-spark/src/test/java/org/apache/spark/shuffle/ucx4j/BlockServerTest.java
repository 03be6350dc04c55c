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
import org.junit.jupiter.api.BeforeEach;
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
 * many requests that reducer makes, fetched in memory or streamed to disk; a reducer that stops taking data holds up
 * no other; every block still arrives whole once the reducer goes on, and every send gives its share back.
 */
class BlockServerTest {
    private static final Duration T = Duration.ofSeconds(10);
    private static final int LARGE = 600 * 1024; // mapped (BlockServer.MAP_MIN is 256 KiB)
    private static final int SMALL = 1000; // read into pool memory
    private static final long BUDGET = 1 << 20;

    @TempDir
    Path dir;
    /** Eight large blocks b0..b7 in one shuffle file, two small ones s0, s1 in memory, an empty one e. */
    private final Map<String, byte[]> expected = new HashMap<>();
    private final Map<String, ManagedBuffer> blocks = new HashMap<>();

    @BeforeEach
    void blocks() throws Exception {
        Random random = new Random(42);
        byte[] file = new byte[8 * LARGE];
        random.nextBytes(file);
        File shuffle = Files.write(dir.resolve("shuffle.data"), file).toFile();
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
        expected.put("e", new byte[0]);
        blocks.put("e", new NioManagedBuffer(java.nio.ByteBuffer.allocate(0)));
    }

    @Test
    void aReducerThatStopsTakingHoldsAtMostTheBudgetAndHoldsUpNoOtherReducer() throws Exception {
        try (PooledAllocator pool = new PooledAllocator(1 << 20)) {
            BlockServer server = new BlockServer(blocks::get, 1 << 20, 2, BUDGET, pool);
            try (Ucx executor = Ucx.open(); Listener l = executor.listen(0, server);
                    Ucx stopped = Ucx.open(UcxOptions.defaults().withProgressMode(ProgressMode.CALLER));
                    Ucx healthy = Ucx.open()) {
                // the first reducer progresses only when this thread drives it: it asks for every block, in two
                // requests, then stops
                Endpoint slow = stopped.connect("127.0.0.1", l.port(), T);
                String[][] requests = {{"b0", "b1", "b2", "b3", "s0", "nope"}, {"b4", "b5", "b6", "b7", "s1", "e"}};
                for (int r = 0; r < 2; r++) {
                    slow.amSend(Wire.header(Wire.FETCH, r + 1, requests[r].length),
                            String.join("\n", requests[r]).getBytes(StandardCharsets.UTF_8), T);
                }
                Thread.sleep(1000); // time to overshoot its budget, if it would
                Data.eventually(() -> server.peakBytesInFlight() > 0); // (a slow machine: not started yet)
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
                // the first reducer goes on: every block arrives whole (the unknown one refused), the budget held
                boolean[][] seen = new boolean[2][6];
                for (int k = 0; k < 12; k++) {
                    try (AmMessage m = slow.amRecv(T)) {
                        Wire.Header h = Wire.Header.parse(m.headerBytes());
                        int r = (int) h.requestId() - 1;
                        String id = requests[r][h.index()];
                        assertTrue(!seen[r][h.index()], "each block once");
                        seen[r][h.index()] = true;
                        if (id.equals("nope")) {
                            assertEquals(Wire.ERROR, h.kind());
                            continue;
                        }
                        assertEquals(Wire.BLOCK, h.kind(), id);
                        assertArrayEquals(expected.get(id), m.payloadBytes(), id);
                    }
                }
                assertTrue(server.peakBytesInFlight() <= BUDGET, "peak " + server.peakBytesInFlight());
                Data.eventually(() -> server.bytesInFlight() == 0); // every send gave its share back
                slow.close(T);
                other.close(T);
            }
        }
    }

    @Test
    void blocksStreamedToDiskStayWithinTheBudgetToo() throws Exception {
        int partSize = 128 * 1024;
        long budget = 512 * 1024;
        try (PooledAllocator pool = new PooledAllocator(1 << 20)) {
            BlockServer server = new BlockServer(blocks::get, partSize, 16, budget, pool);
            try (Ucx executor = Ucx.open(); Listener l = executor.listen(0, server);
                    Ucx stopped = Ucx.open(UcxOptions.defaults().withProgressMode(ProgressMode.CALLER))) {
                Endpoint slow = stopped.connect("127.0.0.1", l.port(), T);
                String[] ids = {"b0", "nope", "s0", "b1", "e"};
                slow.amSend(Wire.header(Wire.FETCH_TO_DISK, 5, ids.length),
                        String.join("\n", ids).getBytes(StandardCharsets.UTF_8), T);
                Thread.sleep(1000); // time to overshoot its budget, if it would
                Data.eventually(() -> server.peakBytesInFlight() > 0); // (a slow machine: not started yet)
                long peak = server.peakBytesInFlight();
                assertTrue(peak > 0 && peak <= budget, "bytes in flight to the stopped reducer: " + peak);
                // parts: 5 + 5 of the large blocks, one each of the small and the empty one; one refusal
                byte[][] got = new byte[ids.length][];
                int messages = 2 * ((LARGE + partSize - 1) / partSize) + 2 + 1;
                for (int k = 0; k < messages; k++) {
                    try (AmMessage m = slow.amRecv(T)) {
                        Wire.Header h = Wire.Header.parse(m.headerBytes());
                        assertEquals(5, h.requestId());
                        String id = ids[h.index()];
                        if (id.equals("nope")) {
                            assertEquals(Wire.ERROR, h.kind());
                            got[h.index()] = new byte[0];
                            continue;
                        }
                        assertEquals(Wire.PART, h.kind(), id);
                        assertEquals(expected.get(id).length, h.blockSize(), id);
                        if (got[h.index()] == null) {
                            got[h.index()] = new byte[(int) h.blockSize()];
                        }
                        m.payload().asByteBuffer().get(got[h.index()], (int) h.offset(), (int) m.payload().byteSize());
                    }
                }
                for (int i = 0; i < ids.length; i++) {
                    if (!ids[i].equals("nope")) {
                        assertArrayEquals(expected.get(ids[i]), got[i], ids[i]);
                    }
                }
                assertTrue(server.peakBytesInFlight() <= budget, "peak " + server.peakBytesInFlight());
                Data.eventually(() -> server.bytesInFlight() == 0);
                slow.close(T);
            }
        }
    }
    /**
     * Spark's resolver takes a batch block id's range as it comes, so a reversed one (start above end) is a block of
     * negative size: that block alone is refused, in memory and to disk, and the rest of the request is served on
     * the same connection (a negative allocation dropped the reducer's whole connection).
     */
    @Test
    void aBlockOfNegativeSizeIsRefusedAloneAndTheConnectionServesOn() throws Exception {
        blocks.put("neg", new FileSegmentManagedBuffer(null, dir.resolve("shuffle.data").toFile(), 1000, -500));
        try (PooledAllocator pool = new PooledAllocator(1 << 20)) {
            BlockServer server = new BlockServer(blocks::get, 1 << 20, 2, BUDGET, pool);
            try (Ucx executor = Ucx.open(); Listener l = executor.listen(0, server); Ucx reducer = Ucx.open();
                    Endpoint ep = reducer.connect("127.0.0.1", l.port(), T)) {
                String[] ids = {"neg", "s0"};
                byte[] kinds = {Wire.FETCH, Wire.FETCH_TO_DISK};
                for (int r = 0; r < kinds.length; r++) {
                    ep.amSend(Wire.header(kinds[r], r, ids.length), String.join("\n", ids)
                            .getBytes(StandardCharsets.UTF_8), T);
                    boolean refused = false, served = false;
                    for (int k = 0; k < 2; k++) {
                        try (AmMessage m = ep.amRecv(T)) {
                            Wire.Header h = Wire.Header.parse(m.headerBytes());
                            assertEquals(r, h.requestId());
                            if (h.index() == 0) {
                                assertEquals(Wire.ERROR, h.kind());
                                assertTrue(new String(m.payload().toArray(java.lang.foreign.ValueLayout.JAVA_BYTE),
                                        StandardCharsets.UTF_8).contains("-500 bytes"));
                                refused = true;
                            } else {
                                byte[] got = m.payload().toArray(java.lang.foreign.ValueLayout.JAVA_BYTE);
                                assertArrayEquals(expected.get("s0"), got);
                                served = true;
                            }
                        }
                    }
                    assertTrue(refused && served);
                }
                assertTrue(ep.isAlive(), "the reducer's connection is still served");
                Data.eventually(() -> server.bytesInFlight() == 0);
            }
        }
    }

    /**
     * A block the index places past the end of its data file (a damaged or replaced file) is refused, in memory and
     * to disk, and the file is left as it is: mapping it through a writable channel would extend the file with
     * zeros and serve them as the block's tail.
     */
    @Test
    void aBlockPastTheEndOfItsFileIsRefusedAndTheFileStaysAsItIs() throws Exception {
        Path data = dir.resolve("shuffle.data");
        long size = Files.size(data);
        blocks.put("short", new FileSegmentManagedBuffer(null, data.toFile(), 7L * LARGE + LARGE / 2, LARGE));
        try (PooledAllocator pool = new PooledAllocator(1 << 20)) {
            BlockServer server = new BlockServer(blocks::get, 1 << 20, 2, BUDGET, pool);
            try (Ucx executor = Ucx.open(); Listener l = executor.listen(0, server); Ucx reducer = Ucx.open();
                    Endpoint ep = reducer.connect("127.0.0.1", l.port(), T)) {
                byte[] kinds = {Wire.FETCH, Wire.FETCH_TO_DISK};
                for (int r = 0; r < kinds.length; r++) {
                    ep.amSend(Wire.header(kinds[r], r, 1), "short".getBytes(StandardCharsets.UTF_8), T);
                    try (AmMessage m = ep.amRecv(T)) {
                        Wire.Header h = Wire.Header.parse(m.headerBytes());
                        assertEquals(r, h.requestId());
                        assertEquals(Wire.ERROR, h.kind(), "a block past the file's end was served");
                        assertTrue(new String(m.payload().toArray(java.lang.foreign.ValueLayout.JAVA_BYTE),
                                StandardCharsets.UTF_8).contains("ends before its block"));
                    }
                    assertEquals(size, Files.size(data), "the shuffle file changed");
                }
                assertTrue(ep.isAlive(), "the reducer's connection is still served");
                Data.eventually(() -> server.bytesInFlight() == 0);
            }
        }
    }

    /** A block larger than the whole budget goes alone, in memory and to disk, rather than waiting forever. */
    @Test
    void aBlockLargerThanTheBudgetGoesAlone() throws Exception {
        long budget = 256 * 1024; // under one large block (600 KiB), and under a to-disk part (512 KiB)
        try (PooledAllocator pool = new PooledAllocator(1 << 20)) {
            BlockServer server = new BlockServer(blocks::get, 512 * 1024, 4, budget, pool);
            try (Ucx executor = Ucx.open(); Listener l = executor.listen(0, server); Ucx reducer = Ucx.open()) {
                Endpoint ep = reducer.connect("127.0.0.1", l.port(), T);
                String[] inMemory = {"b0", "s0", "b1"};
                String[] toDisk = {"b2", "s1"};
                ep.amSend(Wire.header(Wire.FETCH, 1, inMemory.length),
                        String.join("\n", inMemory).getBytes(StandardCharsets.UTF_8), T);
                ep.amSend(Wire.header(Wire.FETCH_TO_DISK, 2, toDisk.length),
                        String.join("\n", toDisk).getBytes(StandardCharsets.UTF_8), T);
                Map<String, byte[]> got = new HashMap<>();
                Map<String, byte[]> partial = new HashMap<>();
                Map<String, Long> arrived = new HashMap<>();
                while (got.size() < inMemory.length + toDisk.length) {
                    try (AmMessage m = ep.amRecv(T)) {
                        Wire.Header h = Wire.Header.parse(m.headerBytes());
                        if (h.requestId() == 1) {
                            assertEquals(Wire.BLOCK, h.kind());
                            got.put(inMemory[h.index()], m.payloadBytes());
                            continue;
                        }
                        assertEquals(Wire.PART, h.kind());
                        String id = toDisk[h.index()];
                        byte[] b = partial.computeIfAbsent(id, k -> new byte[(int) h.blockSize()]);
                        m.payload().asByteBuffer().get(b, (int) h.offset(), (int) m.payload().byteSize());
                        if (arrived.merge(id, m.payload().byteSize(), Long::sum) == h.blockSize()) {
                            got.put(id, b);
                        }
                    }
                }
                for (String id : got.keySet()) {
                    assertArrayEquals(expected.get(id), got.get(id), id);
                }
                assertTrue(server.peakBytesInFlight() <= LARGE, "one block over the budget at a time: "
                        + server.peakBytesInFlight());
                Data.eventually(() -> server.bytesInFlight() == 0);
                ep.close(T);
            }
        }
    }

    /**
     * A reducer whose connection reaches the server only after it was told to go away (its handshake ended as the
     * listener closed) hears GOAWAY too, and its requests are still answered.
     */
    @Test
    void aReducerHandedOverAfterGoAwayIsToldToGoAwayToo() throws Exception {
        try (PooledAllocator pool = new PooledAllocator(1 << 20)) {
            BlockServer server = new BlockServer(blocks::get, 1 << 20, 2, BUDGET, pool);
            try (Ucx executor = Ucx.open(); Listener l = executor.listen(0, server); Ucx reducer = Ucx.open()) {
                server.goAway(); // nobody connected yet
                Endpoint ep = reducer.connect("127.0.0.1", l.port(), T);
                try (AmMessage m = ep.amRecv(T)) {
                    Wire.Header h = Wire.Header.parse(m.headerBytes());
                    assertEquals(Wire.GOAWAY, h.kind());
                }
                ep.amSend(Wire.header(Wire.FETCH, 7, 1), "s0".getBytes(StandardCharsets.UTF_8), T);
                try (AmMessage m = ep.amRecv(T)) {
                    Wire.Header h = Wire.Header.parse(m.headerBytes());
                    assertEquals(Wire.BLOCK, h.kind());
                    assertEquals(7, h.requestId());
                    assertArrayEquals(expected.get("s0"), m.payloadBytes());
                }
                ep.close(T);
            }
        }
    }

    /**
     * A mapped block's mapping goes as soon as its send ends, not when the whole request does: a request naming many
     * large blocks keeps about as many mappings alive as its budget has sends in flight (each one of the kernel's
     * {@code vm.max_map_count}).
     */
    @Test
    void mappingsLastAsLongAsTheirSendsNotTheirRequest() throws Exception {
        Path file = dir.resolve("shuffle.data");
        try (PooledAllocator pool = new PooledAllocator(1 << 20)) {
            BlockServer server = new BlockServer(blocks::get, 1 << 20, 2, BUDGET, pool);
            try (Ucx executor = Ucx.open(); Listener l = executor.listen(0, server);
                    Ucx stopped = Ucx.open(UcxOptions.defaults().withProgressMode(ProgressMode.CALLER))) {
                Endpoint slow = stopped.connect("127.0.0.1", l.port(), T);
                String[] ids = {"b0", "b1", "b2", "b3", "b4", "b5", "b6", "b7"};
                slow.amSend(Wire.header(Wire.FETCH, 3, ids.length),
                        String.join("\n", ids).getBytes(StandardCharsets.UTF_8), T);
                for (int k = 0; k < 6; k++) { // six of eight taken; the request goes on
                    try (AmMessage m = slow.amRecv(T)) {
                        Wire.Header h = Wire.Header.parse(m.headerBytes());
                        assertEquals(Wire.BLOCK, h.kind());
                        assertArrayEquals(expected.get(ids[h.index()]), m.payloadBytes(), ids[h.index()]);
                    }
                }
                // the budget (1 MiB) holds one 600 KiB block in flight, and maybe the next being mapped
                Data.eventually(() -> mappingsOf(file) <= 2);
                for (int k = 0; k < 2; k++) {
                    try (AmMessage m = slow.amRecv(T)) {
                        Wire.Header h = Wire.Header.parse(m.headerBytes());
                        assertArrayEquals(expected.get(ids[h.index()]), m.payloadBytes(), ids[h.index()]);
                    }
                }
                Data.eventually(() -> { // the reducer progresses: its last acknowledgements go out
                    stopped.progress();
                    return mappingsOf(file) == 0;
                });
                slow.close(T);
            }
        }
    }

    /** The process's mappings of {@code file} (lines of {@code /proc/self/maps} naming it). */
    private static long mappingsOf(Path file) {
        try (var lines = Files.lines(Path.of("/proc/self/maps"))) {
            String name = file.toRealPath().toString();
            return lines.filter(line -> line.endsWith(" " + name)).count();
        } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
    }

    /**
     * Blocks are mapped copy-on-write: writable, as an RDMA registration needs (it asks for write access, which a
     * read-only mapping refuses), and nothing written there reaches the shuffle file.
     */
    @Test
    void aMappedBlockIsWritableForRdmaAndTheFileStaysUntouched() throws Exception {
        FileSegmentManagedBuffer b1 = (FileSegmentManagedBuffer) blocks.get("b1");
        try (java.lang.foreign.Arena arena = java.lang.foreign.Arena.ofShared()) {
            java.lang.foreign.MemorySegment m = BlockServer.mapFile(b1, arena);
            assertEquals(LARGE, m.byteSize());
            assertArrayEquals(expected.get("b1"), m.toArray(java.lang.foreign.ValueLayout.JAVA_BYTE));
            org.junit.jupiter.api.Assertions.assertFalse(m.isReadOnly());
            m.fill((byte) 7);
        }
        byte[] onDisk = Files.readAllBytes(dir.resolve("shuffle.data"));
        assertArrayEquals(expected.get("b1"), java.util.Arrays.copyOfRange(onDisk, LARGE, 2 * LARGE));
    }

    /**
     * A block whose send fails with the connection up (UCX could not register its memory, say) is not left
     * unanswered: the connection is dropped, so the reducer's fetch fails at once (and Spark retries it), instead
     * of waiting for its idle timeout.
     */
    @Test
    void aBlockWhoseSendFailsDropsItsConnectionAtOnce() throws Exception {
        try (PooledAllocator pool = new PooledAllocator(1 << 20)) {
            BlockServer server = new BlockServer(blocks::get, 1 << 20, 2, BUDGET, pool);
            try (Ucx executor = Ucx.open(); Listener l = executor.listen(0, server); Ucx reducer = Ucx.open()) {
                Endpoint ep = reducer.connect("127.0.0.1", l.port(), T);
                server.failNextSends(1);
                ep.amSend(Wire.header(Wire.FETCH, 4, 2), "b0\ns0".getBytes(StandardCharsets.UTF_8), T);
                org.ucx4j.UcxException e = org.junit.jupiter.api.Assertions.assertThrows(
                        org.ucx4j.UcxException.class, () -> {
                            for (int k = 0; k < 2; k++) { // s0 may come first; b0 never does
                                try (AmMessage m = ep.amRecv(T)) {
                                    assertEquals("s0", new String[] {"b0", "s0"}[Wire.Header.parse(m.headerBytes())
                                            .index()]);
                                }
                            }
                        });
                org.junit.jupiter.api.Assertions.assertFalse(e instanceof org.ucx4j.UcxTimeoutException,
                        "the connection was dropped, not left to time out: " + e);
                Data.eventually(() -> server.bytesInFlight() == 0);
            }
        }
    }
}
