package org.apache.spark.shuffle.ucx4j;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
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
            CompletableFuture<Endpoint> accepted = new CompletableFuture<>();
            try (Listener l = server.listen(0, accepted::complete)) {
                Endpoint ep = reducer.connect("127.0.0.1", l.port());
                Endpoint serverSide = accepted.get(10, TimeUnit.SECONDS);
                CompletableFuture<PeerConnection> failed = new CompletableFuture<>();
                PeerConnection c = new PeerConnection(new UcxDriverEndpoint.Address("1", "127.0.0.1", l.port()), ep,
                        Duration.ofSeconds(30), null, failed::complete);
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

    private static java.nio.ByteBuffer bufferOf(byte[] b) {
        return java.nio.ByteBuffer.wrap(b);
    }

    @Test
    void aClosedReducerConnectionKeepsItsTrafficFigures() throws Exception {
        BlockServer blocks = new BlockServer(null, 1 << 20, 1);
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
