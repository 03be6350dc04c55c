package org.apache.spark.shuffle.ucx4j;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.StandardOpenOption;
import java.util.ArrayDeque;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.spark.network.buffer.FileSegmentManagedBuffer;
import org.apache.spark.network.buffer.ManagedBuffer;
import org.apache.spark.shuffle.ShuffleBlockResolver;
import org.apache.spark.storage.BlockId;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.ucx4j.AmMessage;
import org.ucx4j.ConnectionHandler;
import org.ucx4j.Endpoint;
import org.ucx4j.UcxException;

import scala.Option;

/**
 * Serves this executor's shuffle blocks to reducers: one virtual thread per connected reducer reads fetch requests
 * and answers each block with an active message whose payload is a read-only mapping of the shuffle file region
 * (blocks from {@link #MAP_MIN} on; smaller ones are read into native memory), so blocks never pass through the
 * heap and large ones go by UCX rendezvous straight from the page cache. The memory of one request lives in one
 * arena that is closed once every send of that request completed. Blocks the reducer writes to disk are streamed
 * in parts of {@code partSize} bytes, at most {@code partsInFlight} of them in flight per request, so the reducer
 * never holds more than that in memory however large a block is.
 */
final class BlockServer implements ConnectionHandler {
    private static final Logger LOG = LoggerFactory.getLogger(BlockServer.class);
    private static final MemorySegment EMPTY = MemorySegment.ofArray(new byte[0]);
    private static final java.util.concurrent.Executor UNMAP = task -> Thread.ofVirtual().name("ucx4j-unmap")
            .start(task);

    private final ShuffleBlockResolver resolver;
    private final long partSize;
    private final int partsInFlight;
    private final Set<Endpoint> clients = ConcurrentHashMap.newKeySet();
    private volatile java.util.function.Consumer<Endpoint> onClientClosed = ep -> { };
    /** Requests still to be answered by dropping their connection (a test's network failure). */
    private final AtomicInteger requestsToDrop = new AtomicInteger();

    BlockServer(ShuffleBlockResolver resolver, long partSize, int partsInFlight) {
        if (partSize <= 0 || partsInFlight <= 0) {
            throw new IllegalArgumentException("ucx4j shuffle: part size and parts in flight must be positive, got "
                    + partSize + " and " + partsInFlight);
        }
        this.resolver = resolver;
        this.partSize = partSize;
        this.partsInFlight = partsInFlight;
    }

    Set<Endpoint> clients() {
        return clients;
    }

    /** Called with each reducer connection that closes (its final statistics are still readable). */
    void onClientClosed(java.util.function.Consumer<Endpoint> sink) {
        this.onClientClosed = sink;
    }

    /**
     * For tests: the next {@code n} requests are not answered, their connections are aborted instead, as a network
     * failure between two live executors would end them.
     */
    void dropNextRequests(int n) {
        requestsToDrop.set(n);
    }

    /** How many of the requests to drop have not come yet. */
    int requestsToDrop() {
        return requestsToDrop.get();
    }

    /** A block to corrupt (a test's network corruption): armed, its id once chosen, how often it was corrupted. */
    private volatile boolean corrupting;
    private String corruptId;
    private int corrupted;

    /**
     * For tests: the next in-memory block served goes out with one byte flipped, as a faulty network would deliver
     * it, and so does that block when it is asked for again (Spark fetches a corrupt block a second time before it
     * diagnoses it); nothing else is touched.
     */
    synchronized void corruptNextBlockTwice() {
        corruptId = null;
        corrupted = 0;
        corrupting = true;
    }

    /** Ends {@link #corruptNextBlockTwice()}. */
    synchronized void stopCorrupting() {
        corrupting = false;
    }

    private synchronized MemorySegment corrupt(String id, MemorySegment data, Arena arena) {
        if (!corrupting || data.byteSize() == 0 || (corruptId != null && !corruptId.equals(id))) {
            return data;
        }
        corruptId = id;
        corrupting = ++corrupted < 2;
        MemorySegment copy = arena.allocate(data.byteSize());
        copy.copyFrom(data);
        long at = data.byteSize() / 2;
        copy.set(ValueLayout.JAVA_BYTE, at, (byte) ~copy.get(ValueLayout.JAVA_BYTE, at));
        LOG.warn("ucx4j shuffle: sending {} with byte {} flipped, as asked", id, at);
        return copy;
    }

    /**
     * Tells every connected reducer to send new requests elsewhere (this server is being replaced); requests already
     * made are still answered.
     */
    void goAway() {
        for (Endpoint ep : clients) {
            ep.amSendAsync(MemorySegment.ofArray(Wire.header(Wire.GOAWAY, 0, 0)), EMPTY).exceptionally(t -> 0L);
        }
    }

    @Override
    public void onConnection(Endpoint ep) {
        clients.add(ep);
        ep.onClose(cause -> {
            if (clients.remove(ep)) {
                onClientClosed.accept(ep);
            }
        });
        try {
            while (true) {
                try (AmMessage m = ep.amRecv()) {
                    Wire.Header h = Wire.Header.parse(m.headerBytes());
                    if (h.kind() != Wire.FETCH && h.kind() != Wire.FETCH_TO_DISK) {
                        throw new IOException("expected a fetch request, got message kind " + h.kind());
                    }
                    String[] ids = new String(m.payloadBytes(), StandardCharsets.UTF_8).split("\n", -1);
                    if (ids.length != h.index()) {
                        throw new IOException("fetch request names " + ids.length + " blocks, header says "
                                + h.index());
                    }
                    if (requestsToDrop.get() > 0 && requestsToDrop.getAndUpdate(n -> Math.max(0, n - 1)) > 0) {
                        LOG.warn("ucx4j shuffle: dropping connection {} with request {} unanswered, as asked",
                                ep, h.requestId());
                        ep.abort();
                        return;
                    }
                    if (h.kind() == Wire.FETCH) {
                        serve(ep, h.requestId(), ids);
                    } else {
                        Thread.ofVirtual().name("ucx4j-shuffle-parts").start(() -> serveParts(ep, h.requestId(), ids));
                    }
                }
            }
        } catch (UcxException peerGone) {
            LOG.debug("ucx4j shuffle: reducer {} left: {}", ep, peerGone.getMessage());
            ep.abort(); // a connection still open (a refused or unallocatable request) must not stay unserved
        } catch (IOException | RuntimeException e) {
            LOG.warn("ucx4j shuffle: dropping connection {}: {}", ep, e.toString());
            ep.abort();
        }
    }

    private void serve(Endpoint ep, long requestId, String[] ids) {
        Arena arena = Arena.ofShared();
        CompletableFuture<?>[] sends = new CompletableFuture<?>[ids.length];
        try {
            for (int i = 0; i < ids.length; i++) {
                MemorySegment data;
                try {
                    data = block(ids[i], arena);
                } catch (Exception e) {
                    sends[i] = refuse(ep, requestId, i, ids[i], e);
                    continue;
                }
                if (corrupting) {
                    data = corrupt(ids[i], data, arena);
                }
                sends[i] = ep.amSendAsync(MemorySegment.ofArray(Wire.header(Wire.BLOCK, requestId, i)), data);
            }
        } finally { // also when a send is refused at once (the instance closed): the mappings go once the sends
            // made so far have ended
            CompletableFuture<?>[] made = java.util.Arrays.stream(sends).filter(java.util.Objects::nonNull)
                    .toArray(CompletableFuture<?>[]::new);
            // closing a shared arena is a handshake with every thread of the JVM: never on ucx4j's progress thread,
            // which completes the last send
            CompletableFuture.allOf(made).whenCompleteAsync((v, t) -> arena.close(), UNMAP);
        }
    }

    /** Streams each block of a to-disk request in parts, with a bounded number in flight. */
    private void serveParts(Endpoint ep, long requestId, String[] ids) {
        ArrayDeque<CompletableFuture<?>> inFlight = new ArrayDeque<>();
        Arena arena = Arena.ofShared();
        try {
            for (int i = 0; i < ids.length; i++) {
                MemorySegment data;
                try {
                    data = block(ids[i], arena);
                } catch (Exception e) {
                    inFlight.add(refuse(ep, requestId, i, ids[i], e));
                    continue;
                }
                long size = data.byteSize();
                long offset = 0;
                do {
                    long n = Math.min(partSize, size - offset);
                    while (inFlight.size() >= partsInFlight) {
                        inFlight.poll().join();
                    }
                    inFlight.add(ep.amSendAsync(MemorySegment.ofArray(Wire.partHeader(requestId, i, offset, size)),
                            data.asSlice(offset, n)));
                    offset += n;
                } while (offset < size);
            }
        } catch (RuntimeException e) {
            LOG.debug("ucx4j shuffle: streaming to {} stopped: {}", ep, e.toString());
        } finally {
            // UCX reads the mappings until each send has completed (a failed endpoint completes them promptly)
            for (CompletableFuture<?> f : inFlight) {
                f.exceptionally(t -> null).join();
            }
            arena.close();
        }
    }

    private MemorySegment block(String id, Arena arena) throws IOException {
        return map(resolver.getBlockData(BlockId.apply(id), Option.empty()), arena);
    }

    /** Tells the reducer why block {@code index} cannot be served. */
    private static CompletableFuture<?> refuse(Endpoint ep, long requestId, int index, String id, Exception e) {
        LOG.warn("ucx4j shuffle: cannot serve block {}: {}", id, e.toString());
        byte[] why = String.valueOf(e).getBytes(StandardCharsets.UTF_8);
        return ep.amSendAsync(MemorySegment.ofArray(Wire.header(Wire.ERROR, requestId, index)),
                MemorySegment.ofArray(why));
    }

    /**
     * From this size on a block is mapped; smaller ones are read into native memory. A mapping costs a page-table
     * setup and one of the kernel's {@code vm.max_map_count} (65530 by default) for as long as its sends run, and
     * thousands of small blocks in flight would exhaust that.
     */
    static final long MAP_MIN = 256 * 1024;

    /** The block's bytes without copying them into the heap: a mapping of its file region where there is one. */
    private static MemorySegment map(ManagedBuffer block, Arena arena) throws IOException {
        if (block.size() == 0) {
            return EMPTY;
        }
        if (block instanceof FileSegmentManagedBuffer f) {
            try (FileChannel ch = FileChannel.open(f.getFile().toPath(), StandardOpenOption.READ)) {
                if (f.getLength() >= MAP_MIN) {
                    return ch.map(FileChannel.MapMode.READ_ONLY, f.getOffset(), f.getLength(), arena);
                }
                MemorySegment bytes = arena.allocate(f.getLength());
                java.nio.ByteBuffer into = bytes.asByteBuffer();
                while (into.hasRemaining()) {
                    if (ch.read(into, f.getOffset() + into.position()) < 0) {
                        throw new java.io.EOFException(f.getFile() + " ends before its block " + f.getOffset()
                                + "+" + f.getLength());
                    }
                }
                return bytes;
            }
        }
        MemorySegment copy = arena.allocate(block.size());
        copy.copyFrom(MemorySegment.ofBuffer(block.nioByteBuffer()));
        return copy;
    }
}
