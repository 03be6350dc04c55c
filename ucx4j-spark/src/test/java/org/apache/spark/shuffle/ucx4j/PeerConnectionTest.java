package org.apache.spark.shuffle.ucx4j;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.MemorySegment;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;

import org.apache.spark.network.buffer.ManagedBuffer;
import org.apache.spark.network.shuffle.BlockFetchingListener;
import org.junit.jupiter.api.Test;
import org.ucx4j.Endpoint;
import org.ucx4j.Listener;
import org.ucx4j.MemoryAllocator;
import org.ucx4j.MemoryType;
import org.ucx4j.Ucx;
import org.ucx4j.UcxOptions;

/**
 * A reducer's connection to one block server, against a hand-driven server: a block whose memory the reducer cannot
 * allocate fails alone (Spark retries it); the other blocks of the request, and the connection, go on.
 */
class PeerConnectionTest {
    static final int UNTAKEABLE = 4321;

    @Test
    void aBlockThatCannotBeAllocatedFailsAloneAndTheConnectionLivesOn() throws Exception {
        MemoryAllocator refusing = new MemoryAllocator() {
            @Override
            public MemorySegment allocate(long bytes) {
                if (bytes == UNTAKEABLE) {
                    throw new OutOfMemoryError("test: no memory for this block");
                }
                return MemoryAllocator.malloc().allocate(bytes);
            }

            @Override
            public void free(MemorySegment segment) {
                MemoryAllocator.malloc().free(segment);
            }
        };
        try (Ucx server = Ucx.open(); Ucx reducer = Ucx.open(UcxOptions.defaults()
                .withAllocator(MemoryType.HOST, refusing))) {
            CompletableFuture<PeerConnection> failed = new CompletableFuture<>();
            try (Link link = Link.open(server, reducer, Duration.ofSeconds(30), failed::complete)) {
                PeerConnection c = link.connection();
                Endpoint serverSide = link.serverSide();
                Map<String, Object> outcome = new ConcurrentHashMap<>();
                CompletableFuture<Void> all = new CompletableFuture<>();
                BlockFetchingListener listener = new BlockFetchingListener() {
                    @Override
                    public void onBlockFetchSuccess(String blockId, ManagedBuffer data) {
                        try { // copied: the buffer is released when this returns
                            java.nio.ByteBuffer b = data.nioByteBuffer();
                            byte[] out = new byte[b.remaining()];
                            b.get(out);
                            outcome.put(blockId, java.nio.ByteBuffer.wrap(out));
                        } catch (java.io.IOException e) {
                            outcome.put(blockId, e);
                        }
                        if (outcome.size() == 3) {
                            all.complete(null);
                        }
                    }

                    @Override
                    public void onBlockFetchFailure(String blockId, Throwable e) {
                        outcome.put(blockId, e);
                        if (outcome.size() == 3) {
                            all.complete(null);
                        }
                    }
                };
                c.fetch(7, new String[] {"a", "b", "c"}, listener, null);
                serverSide.amRecv(Duration.ofSeconds(10)).close(); // the request
                byte[][] blocks = {new byte[100], new byte[UNTAKEABLE], new byte[200]};
                for (int i = 0; i < 3; i++) {
                    java.util.Arrays.fill(blocks[i], (byte) (i + 1));
                    serverSide.amSend(Wire.header(Wire.BLOCK, 7, i), blocks[i]);
                }
                all.get(20, TimeUnit.SECONDS);
                assertEquals(bufferOf(blocks[0]), outcome.get("a"));
                assertTrue(outcome.get("b") instanceof java.io.IOException e
                        && e.getMessage().contains("UCS_ERR_NO_MEMORY"), String.valueOf(outcome.get("b")));
                assertEquals(bufferOf(blocks[2]), outcome.get("c"));
                assertTrue(c.isUsable(), "the connection survives a block it could not take");
                assertTrue(!failed.isDone());
                // and serves the next request
                CompletableFuture<byte[]> next = new CompletableFuture<>();
                c.fetch(8, new String[] {"d"}, new BlockFetchingListener() {
                    @Override
                    public void onBlockFetchSuccess(String blockId, ManagedBuffer data) {
                        try {
                            java.nio.ByteBuffer b = data.nioByteBuffer();
                            byte[] out = new byte[b.remaining()];
                            b.get(out);
                            next.complete(out);
                        } catch (java.io.IOException e) {
                            next.completeExceptionally(e);
                        }
                    }

                    @Override
                    public void onBlockFetchFailure(String blockId, Throwable e) {
                        next.completeExceptionally(e);
                    }
                }, null);
                serverSide.amRecv(Duration.ofSeconds(10)).close();
                serverSide.amSend(Wire.header(Wire.BLOCK, 8, 0), new byte[] {9, 9});
                assertArrayEquals(new byte[] {9, 9}, next.get(20, TimeUnit.SECONDS));
                c.close();
            }
        }
    }

    /**
     * A connection retired between its lookup and a request refuses the request, sending nothing and telling nobody
     * (the client then asks on a new connection), instead of sending it on a connection that is closing; and one
     * whose instance closed fails the request's blocks instead of throwing at the caller.
     */
    @Test
    void aRetiredConnectionRefusesNewRequestsAndAClosedOneFailsThem() throws Exception {
        try (Ucx server = Ucx.open(); Ucx reducer = Ucx.open()) {
            try (Link link = Link.open(server, reducer, Duration.ofSeconds(30), x -> {})) {
                PeerConnection c = link.connection();
                Endpoint serverSide = link.serverSide();
                Map<String, Throwable> failures = new ConcurrentHashMap<>();
                BlockFetchingListener listener = new BlockFetchingListener() {
                    @Override
                    public void onBlockFetchSuccess(String blockId, ManagedBuffer data) {
                        failures.put(blockId, new AssertionError("no block was sent"));
                    }

                    @Override
                    public void onBlockFetchFailure(String blockId, Throwable e) {
                        failures.put(blockId, e);
                    }
                };
                c.retire();
                assertTrue(!c.fetch(9, new String[] {"x"}, listener, null), "a retired connection takes no request");
                assertTrue(failures.isEmpty(), "nobody is told: the request goes elsewhere");
                // nothing was sent: no message comes before the retired connection's close reaches the server
                org.junit.jupiter.api.Assertions.assertThrows(org.ucx4j.UcxException.class,
                        () -> serverSide.amRecv(Duration.ofMillis(300)), "nothing was sent");
            }
            // a fresh connection whose UCX instance closes under it: the blocks fail, the caller sees no exception
            CompletableFuture<Endpoint> accepted2 = new CompletableFuture<>();
            try (Listener l = server.listen(0, accepted2::complete)) {
                Ucx gone = Ucx.open();
                Endpoint ep = gone.connect("127.0.0.1", l.port());
                PeerConnection c = new PeerConnection(new UcxDriverEndpoint.Address("2", "127.0.0.1", l.port()), ep,
                        Duration.ofSeconds(30), null, x -> {});
                gone.close();
                CompletableFuture<Throwable> failed = new CompletableFuture<>();
                boolean taken = c.fetch(10, new String[] {"y"}, firstOutcome(failed), null);
                assertTrue(taken);
                assertTrue(failed.get(20, TimeUnit.SECONDS) instanceof java.io.IOException, "an IOException");
            }
        }
    }

    /**
     * A request without data for the network timeout fails its blocks with an {@code IOException} (which the client
     * retries) and retires its connection, so the retry goes to a new one: the connection takes no new request, and
     * closes once nothing is pending on it.
     */
    @Test
    void aStalledRequestFailsAndRetiresItsConnection() throws Exception {
        try (Ucx server = Ucx.open(); Ucx reducer = Ucx.open()) {
            CompletableFuture<PeerConnection> unusable = new CompletableFuture<>();
            try (Link link = Link.open(server, reducer, Duration.ofSeconds(1), unusable::complete)) {
                PeerConnection c = link.connection();
                Endpoint serverSide = link.serverSide();
                CompletableFuture<Throwable> failed = new CompletableFuture<>();
                CompletableFuture<Boolean> retriedHere = new CompletableFuture<>();
                BlockFetchingListener retrying = new BlockFetchingListener() {
                    @Override
                    public void onBlockFetchSuccess(String blockId, ManagedBuffer data) {
                        failed.complete(null);
                    }

                    @Override
                    public void onBlockFetchFailure(String blockId, Throwable e) {
                        // a retry made at once from the failure callback (retryWait 0) asks the same connection
                        retriedHere.complete(c.fetch(13, new String[] {"z"}, firstOutcome(new CompletableFuture<>()),
                                null));
                        failed.complete(e);
                    }
                };
                assertTrue(c.fetch(11, new String[] {"z"}, retrying, null));
                serverSide.amRecv(Duration.ofSeconds(10)).close(); // the request, never answered
                Throwable e = failed.get(20, TimeUnit.SECONDS);
                assertFalse(retriedHere.get(), "a retry from the failure callback is refused: the connection is "
                        + "retired before its requests fail");
                assertTrue(e instanceof java.io.IOException
                        && e.getMessage().contains("spark.shuffle.io.connectionTimeout"), String.valueOf(e));
                assertEquals(c, unusable.get(10, TimeUnit.SECONDS), "the client was told to forget it");
                assertTrue(!c.isUsable());
                assertTrue(!c.fetch(12, new String[] {"w"}, firstOutcome(new CompletableFuture<>()), null), "a retired connection takes no new request");
                serverSide.closeFuture().get(20, TimeUnit.SECONDS); // nothing was pending: it closed
            }
        }
    }

    /** Without an idle timeout (a connection timeout under a second, as Netty takes it) a quiet request waits. */
    @Test
    void withoutAnIdleTimeoutAQuietRequestIsNotFailed() throws Exception {
        try (Ucx server = Ucx.open(); Ucx reducer = Ucx.open()) {
            try (Link link = Link.open(server, reducer, Duration.ZERO, x -> {})) {
                CompletableFuture<Throwable> outcome = new CompletableFuture<>();
                assertTrue(link.connection().fetch(11, new String[] {"z"}, firstOutcome(outcome), null));
                link.serverSide().amRecv(Duration.ofSeconds(10)).close(); // the request, not answered yet
                // the stall check runs every second: three of them pass
                assertThrows(java.util.concurrent.TimeoutException.class, () -> outcome.get(3, TimeUnit.SECONDS));
                assertTrue(link.connection().isUsable());
            }
        }
    }

    /**
     * A block server answers one request at a time on a connection: a request waiting behind another whose blocks
     * are still arriving is not stalled, however long it waits (the timeout is for a quiet connection, as Netty's).
     */
    @Test
    void aRequestQueuedBehindOneStillArrivingDoesNotTimeOut() throws Exception {
        try (Ucx server = Ucx.open(); Ucx reducer = Ucx.open()) {
            try (Link link = Link.open(server, reducer, Duration.ofSeconds(2), x -> {})) {
                PeerConnection c = link.connection();
                Endpoint serverSide = link.serverSide();
                int n = 8;
                String[] first = new String[n];
                for (int i = 0; i < n; i++) {
                    first[i] = "a" + i;
                }
                Map<String, Object> outcome = new ConcurrentHashMap<>();
                BlockFetchingListener listener = new BlockFetchingListener() {
                    @Override
                    public void onBlockFetchSuccess(String blockId, ManagedBuffer data) {
                        outcome.put(blockId, data.size());
                    }

                    @Override
                    public void onBlockFetchFailure(String blockId, Throwable e) {
                        outcome.put(blockId, e);
                    }
                };
                assertTrue(c.fetch(21, first, listener, null));
                assertTrue(c.fetch(22, new String[] {"b"}, listener, null));
                serverSide.amRecv(Duration.ofSeconds(10)).close(); // both requests
                serverSide.amRecv(Duration.ofSeconds(10)).close();
                // the first request's blocks come one every 500 ms: 4 s, twice the timeout, before the second's
                for (int i = 0; i < n; i++) {
                    Thread.sleep(500);
                    serverSide.amSend(Wire.header(Wire.BLOCK, 21, i), new byte[] {(byte) i});
                }
                serverSide.amSend(Wire.header(Wire.BLOCK, 22, 0), new byte[] {42, 43});
                Data.eventually(() -> outcome.size() == n + 1);
                for (String id : first) {
                    assertEquals(1L, outcome.get(id), id + ": " + outcome.get(id));
                }
                assertEquals(2L, outcome.get("b"), "the waiting request's block: " + outcome.get("b"));
                assertTrue(c.isUsable(), "the connection was not retired");
            }
        }
    }

    /** A listener on {@code server}, a reducer's connection to it, and the server's side of that connection. */
    private record Link(Listener listener, PeerConnection connection, Endpoint serverSide) implements AutoCloseable {
        static Link open(Ucx server, Ucx reducer, Duration timeout,
                java.util.function.Consumer<PeerConnection> onUnusable) throws Exception {
            CompletableFuture<Endpoint> accepted = new CompletableFuture<>();
            Listener l = server.listen(0, accepted::complete);
            Endpoint ep = reducer.connect("127.0.0.1", l.port());
            Endpoint serverSide = accepted.get(10, TimeUnit.SECONDS);
            return new Link(l, new PeerConnection(new UcxDriverEndpoint.Address("1", "127.0.0.1", l.port()), ep,
                    timeout, null, onUnusable), serverSide);
        }

        @Override
        public void close() {
            listener.close();
        }
    }

    /** A listener that completes {@code outcome} with the first block's failure, or null for a success. */
    private static BlockFetchingListener firstOutcome(CompletableFuture<Throwable> outcome) {
        return new BlockFetchingListener() {
            @Override
            public void onBlockFetchSuccess(String blockId, ManagedBuffer data) {
                outcome.complete(null);
            }

            @Override
            public void onBlockFetchFailure(String blockId, Throwable e) {
                outcome.complete(e);
            }
        };
    }

    private static java.nio.ByteBuffer bufferOf(byte[] b) {
        return java.nio.ByteBuffer.wrap(b);
    }

    @Test
    void aClosedReducerConnectionKeepsItsTrafficFigures() throws Exception {
        BlockServer blocks = new BlockServer(id -> null, 1 << 20, 1, 1 << 20, MemoryAllocator.malloc());
        CompletableFuture<Endpoint> closed = new CompletableFuture<>();
        blocks.onClientClosed(closed::complete);
        try (Ucx server = Ucx.open(); Ucx reducer = Ucx.open(); Listener l = server.listen(0, blocks)) {
            Endpoint ep = reducer.connect("127.0.0.1", l.port());
            // not a fetch request: the server drops the connection
            ep.amSend(Wire.header((byte) 99, 1, 0), new byte[1000]);
            Endpoint gone = closed.get(10, TimeUnit.SECONDS);
            assertTrue(gone.isClosed());
            assertEquals(1, gone.stats().messagesReceived());
            assertEquals(1000, gone.stats().bytesReceived());
            assertTrue(blocks.clients().isEmpty());
            ep.abort();
        }
    }
}
