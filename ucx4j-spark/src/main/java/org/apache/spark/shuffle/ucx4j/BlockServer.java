package org.apache.spark.shuffle.ucx4j;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.StandardOpenOption;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Function;

import org.apache.spark.network.buffer.FileSegmentManagedBuffer;
import org.apache.spark.network.buffer.ManagedBuffer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.ucx4j.AmMessage;
import org.ucx4j.ConnectionHandler;
import org.ucx4j.Endpoint;
import org.ucx4j.MemoryAllocator;
import org.ucx4j.UcxException;

/**
 * Serves this executor's shuffle blocks to reducers: one virtual thread per connected reducer reads fetch requests
 * and answers each block with an active message whose payload is a copy-on-write mapping of the shuffle file region
 * (blocks from {@link #MAP_MIN} on; smaller ones are read into pool memory, given back as each send ends), so
 * blocks never pass through the heap and large ones go by UCX rendezvous straight from the page cache (over shared
 * memory and TCP; an RDMA registration copies the pages it pins). Each mapping has its own arena, closed once its
 * send completed. Blocks the reducer writes to disk are streamed in parts of {@code partSize} bytes, at most
 * {@code partsInFlight} of them in flight per request, so the reducer never holds more than that in memory however
 * large a block is.
 *
 * <p>Each reducer connection has a {@link SendBudget} of {@code bytesInFlight}: a block (or part) is read into memory
 * or sent only when the sends to that reducer before it leave room, and the connection's next request is read only
 * when every block of its current one has been handed to UCX (requests, to-disk ones too, are served on the
 * connection's thread), so a reducer that asks faster than it takes (many tasks, a slow or stopped process) has at
 * most that much in flight from this server, however many requests it makes, and holds up no other reducer.
 */
final class BlockServer implements ConnectionHandler {
    private static final Logger LOG = LoggerFactory.getLogger(BlockServer.class);
    private static final MemorySegment EMPTY = MemorySegment.ofArray(new byte[0]);
    private static final java.util.concurrent.Executor UNMAP = task -> Thread.ofVirtual().name("ucx4j-unmap")
            .start(task);

    private final Function<String, ManagedBuffer> blocks;
    private final long partSize;
    private final int partsInFlight;
    private final long budgetBytes;
    private final MemoryAllocator pool;
    private final AtomicLong peakBytesInFlight = new AtomicLong();
    private final AtomicLong bytesInFlight = new AtomicLong();
    private final Set<Endpoint> clients = ConcurrentHashMap.newKeySet();
    private volatile java.util.function.Consumer<Endpoint> onClientClosed = ep -> { };
    /** Requests still to be answered by dropping their connection (a test's network failure). */
    private final AtomicInteger requestsToDrop = new AtomicInteger();

    /**
     * Serves the blocks {@code blocks} finds by id (Spark's block resolver), sending at most {@code bytesInFlight}
     * to each reducer at once; small blocks are read into memory from {@code pool}.
     */
    BlockServer(Function<String, ManagedBuffer> blocks, long partSize, int partsInFlight, long bytesInFlight,
            MemoryAllocator pool) {
        if (partSize <= 0 || partsInFlight <= 0 || bytesInFlight <= 0) {
            throw new IllegalArgumentException("ucx4j shuffle: part size, parts in flight and the server's bytes in "
                    + "flight must be positive, got " + partSize + ", " + partsInFlight + " and " + bytesInFlight);
        }
        this.blocks = blocks;
        this.partSize = partSize;
        this.partsInFlight = partsInFlight;
        this.budgetBytes = bytesInFlight;
        this.pool = pool;
    }

    /** The most bytes this server ever had in flight to one reducer (tests check the bound). */
    long peakBytesInFlight() {
        return peakBytesInFlight.get();
    }

    /** The bytes this server has in flight now, to all reducers (tests check that every send gives back its share). */
    long bytesInFlight() {
        return bytesInFlight.get();
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

    /** Block sends still to fail as UCX would fail them with the connection up (a test's registration failure). */
    private final AtomicInteger sendsToFail = new AtomicInteger();

    /** For tests: the next {@code n} block sends fail as a send UCX cannot make fails, the connection kept up. */
    void failNextSends(int n) {
        sendsToFail.set(n);
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
        goingAway = true;
        for (Endpoint ep : clients) {
            sendGoAway(ep);
        }
    }

    /** Set by {@link #goAway()}: a reducer whose connection is handed over only later is told at once. */
    private volatile boolean goingAway;

    private static void sendGoAway(Endpoint ep) {
        ep.amSendAsync(MemorySegment.ofArray(Wire.header(Wire.GOAWAY, 0, 0)), EMPTY).exceptionally(t -> 0L);
    }

    @Override
    public void onConnection(Endpoint ep) {
        clients.add(ep);
        ep.onClose(cause -> {
            if (clients.remove(ep)) {
                onClientClosed.accept(ep);
            }
        });
        if (goingAway) { // accepted before the listener closed, handed over after goAway() went through the clients
            sendGoAway(ep); // (it may hear it twice: one more is harmless)
        }
        SendBudget budget = new SendBudget(budgetBytes, peakBytesInFlight, bytesInFlight);
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
                        serve(ep, budget, h.requestId(), ids);
                    } else {
                        serveParts(ep, budget, h.requestId(), ids);
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

    private void serve(Endpoint ep, SendBudget budget, long requestId, String[] ids) throws IOException {
        Refusals refusals = new Refusals(ep, requestId);
        try {
            for (int i = 0; i < ids.length; i++) {
                ManagedBuffer block = find(refusals, i, ids[i], null);
                if (block == null) {
                    continue;
                }
                long size = block.size();
                // this reducer's earlier sends must leave room (no further request is read meanwhile)
                budget.acquire(size);
                if (!ep.isAlive()) { // the reducer went while this waited: the next receive says why
                    budget.release(size);
                    return;
                }
                send(ep, requestId, i, ids[i], block, budget, refusals);
            }
        } finally {
            refusals.report();
        }
    }

    /**
     * Sends one block, whose share of the budget is taken: a file region from {@link #MAP_MIN} on is mapped, anything
     * smaller is read into pool memory; the share and the memory (the mapping too) are given back when the send
     * ends, so the mappings alive stay within the budget however many blocks a request names. A block that cannot
     * be read is refused instead (the rest of the request goes on).
     */
    private void send(Endpoint ep, long requestId, int index, String id, ManagedBuffer block, SendBudget budget,
            Refusals refusals) {
        long size = block.size();
        Arena mapping = null; // a mapping's, or a test's corrupted copy's
        MemorySegment copy = null;
        MemorySegment data;
        try {
            if (size >= MAP_MIN && block instanceof FileSegmentManagedBuffer f) {
                mapping = Arena.ofShared();
                data = mapFile(f, mapping);
            } else {
                data = size == 0 ? EMPTY : (copy = read(block));
            }
            if (corrupting) {
                if (mapping == null) {
                    mapping = Arena.ofShared();
                }
                data = corrupt(id, data, mapping);
            }
        } catch (Throwable e) {
            giveBack(copy, size, budget, mapping);
            if (e instanceof Error err) {
                throw err;
            }
            refusals.refuse(index, id, e);
            return;
        }
        MemorySegment owned = copy;
        Arena arena = mapping;
        CompletableFuture<?> sent;
        try {
            sent = sendsToFail.get() > 0 && sendsToFail.getAndUpdate(n -> Math.max(0, n - 1)) > 0
                    ? CompletableFuture.failedFuture(new org.ucx4j.UcxException("send failed as asked (UCS_ERR_IO_ERROR)",
                            -3))
                    : ep.amSendAsync(MemorySegment.ofArray(Wire.header(Wire.BLOCK, requestId, index)), data);
        } catch (RuntimeException | Error e) {
            giveBack(owned, size, budget, arena);
            throw e;
        }
        sent.whenComplete((v, t) -> { // UCX has let go of the bytes
            giveBack(owned, size, budget, arena);
            if (t != null) {
                unanswered(ep, id, t);
            }
        });
    }

    /**
     * A send that failed while its connection stays up (UCX could not register or read the block's memory, say)
     * leaves the reducer without an answer for that block: the connection is dropped, so that the reducer's fetch
     * fails at once and is retried as any lost connection's, instead of waiting for its idle timeout.
     */
    private static void unanswered(Endpoint ep, String id, Throwable t) {
        if (ep.isAlive()) {
            Throwable cause = t instanceof java.util.concurrent.CompletionException && t.getCause() != null
                    ? t.getCause() : t;
            // the connection going anyway (the reducer closed it or died: UCX fails the sends first) is no news
            boolean going = cause instanceof org.ucx4j.CanceledException
                    || cause instanceof org.ucx4j.ConnectionResetException
                    || cause instanceof org.ucx4j.EndpointClosedException;
            if (going) {
                LOG.debug("ucx4j shuffle: dropping connection {}: a send of block {} failed: {}", ep, id, cause);
            } else {
                LOG.warn("ucx4j shuffle: dropping connection {}: a send of block {} failed: {}", ep, id, cause);
            }
            Thread.ofVirtual().name("ucx4j-shuffle-drop").start(ep::abort); // not on the thread completing sends
        }
    }

    private void giveBack(MemorySegment copy, long size, SendBudget budget) {
        if (copy != null) {
            pool.free(copy);
        }
        budget.release(size);
    }

    /** {@link #giveBack(MemorySegment, long, SendBudget)}, and a block's own arena (its mapping) is closed. */
    private void giveBack(MemorySegment copy, long size, SendBudget budget, Arena mapping) {
        giveBack(copy, size, budget);
        if (mapping != null) {
            // closing a shared arena is a handshake with every thread of the JVM: never on ucx4j's progress thread,
            // which completes sends
            UNMAP.execute(mapping::close);
        }
    }

    /**
     * The block {@code id}, or null after telling the reducer that it cannot be served (that answer's send is added
     * to {@code sends}, if given).
     */
    private ManagedBuffer find(Refusals refusals, int index, String id, Collection<CompletableFuture<?>> sends) {
        try {
            ManagedBuffer b = Objects.requireNonNull(blocks.apply(id), "no such block");
            if (b.size() < 0) { // Spark's resolver takes a batch id's reversed range (start > end) as it comes
                throw new IllegalArgumentException("a block of " + b.size() + " bytes");
            }
            return b;
        } catch (Exception e) {
            CompletableFuture<?> told = refusals.refuse(index, id, e);
            if (sends != null) {
                sends.add(told);
            }
            return null;
        }
    }

    /**
     * Streams each block of a to-disk request in parts, at most {@code partsInFlight} of them in flight, on the
     * connection's thread and within its budget: a mapped block takes the budget part by part, one read into memory
     * (a small or in-memory block) all at once; each block's memory goes once its parts have been sent.
     */
    private void serveParts(Endpoint ep, SendBudget budget, long requestId, String[] ids) throws IOException {
        Refusals refusals = new Refusals(ep, requestId);
        try {
            serveParts(ep, budget, requestId, ids, refusals);
        } finally {
            refusals.report();
        }
    }

    private void serveParts(Endpoint ep, SendBudget budget, long requestId, String[] ids, Refusals refusals)
            throws IOException {
        ArrayDeque<CompletableFuture<?>> inFlight = new ArrayDeque<>();
        for (int i = 0; i < ids.length; i++) {
            ManagedBuffer block = find(refusals, i, ids[i], inFlight);
            if (block == null) {
                continue;
            }
            long size = block.size();
            FileSegmentManagedBuffer file = size >= MAP_MIN && block instanceof FileSegmentManagedBuffer f ? f : null;
            Arena arena = null;
            MemorySegment copy = null;
            MemorySegment data;
            if (file == null) {
                budget.acquire(size);
            }
            try {
                if (file != null) {
                    arena = Arena.ofShared();
                    data = mapFile(file, arena);
                } else {
                    data = size == 0 ? EMPTY : (copy = read(block));
                }
            } catch (Throwable e) {
                if (arena != null) {
                    arena.close();
                } else {
                    giveBack(copy, size, budget);
                }
                if (e instanceof Error err) {
                    throw err;
                }
                inFlight.add(refusals.refuse(i, ids[i], e));
                continue;
            }
            List<CompletableFuture<?>> parts = new ArrayList<>();
            try {
                long offset = 0;
                do {
                    long n = Math.min(partSize, size - offset);
                    while (inFlight.size() >= partsInFlight) {
                        inFlight.poll().exceptionally(t -> null).join();
                    }
                    if (file != null) {
                        budget.acquire(n);
                    }
                    if (!ep.isAlive()) { // the reducer went: the next receive says why
                        if (file != null) {
                            budget.release(n);
                        }
                        return;
                    }
                    CompletableFuture<?> sent;
                    try {
                        sent = ep.amSendAsync(MemorySegment.ofArray(Wire.partHeader(requestId, i, offset, size)),
                                data.asSlice(offset, n));
                    } catch (RuntimeException | Error e) {
                        if (file != null) {
                            budget.release(n);
                        }
                        throw e;
                    }
                    String id = ids[i];
                    CompletableFuture<?> done = sent.whenComplete((v, t) -> {
                        if (file != null) {
                            budget.release(n);
                        }
                        if (t != null) {
                            unanswered(ep, id, t);
                        }
                    });
                    inFlight.add(done);
                    parts.add(done);
                    offset += n;
                } while (offset < size);
            } finally { // UCX reads the block until each of its parts' sends has ended
                CompletableFuture<Void> all = CompletableFuture.allOf(parts.toArray(CompletableFuture<?>[]::new));
                if (arena != null) {
                    Arena a = arena;
                    all.whenCompleteAsync((v, t) -> a.close(), UNMAP);
                } else {
                    MemorySegment owned = copy;
                    all.whenComplete((v, t) -> giveBack(owned, size, budget));
                }
            }
        }
    }

    /**
     * The blocks of one request that cannot be served: each is refused to the reducer with its reason, and the
     * request's refusals are logged once (a request for many blocks of a shuffle this executor no longer has would
     * otherwise write a warning per block), each at debug level.
     */
    private static final class Refusals {
        private final Endpoint ep;
        private final long requestId;
        private int count;
        private String first;

        Refusals(Endpoint ep, long requestId) {
            this.ep = ep;
            this.requestId = requestId;
        }

        /** Tells the reducer why block {@code index} cannot be served. */
        CompletableFuture<?> refuse(int index, String id, Throwable e) {
            LOG.debug("ucx4j shuffle: cannot serve block {}: {}", id, e.toString());
            if (count++ == 0) {
                first = id + ": " + e;
            }
            byte[] why = String.valueOf(e).getBytes(StandardCharsets.UTF_8);
            return ep.amSendAsync(MemorySegment.ofArray(Wire.header(Wire.ERROR, requestId, index)),
                    MemorySegment.ofArray(why)).whenComplete((v, t) -> {
                        if (t != null) {
                            unanswered(ep, id, t);
                        }
                    });
        }

        void report() {
            if (count > 0) {
                LOG.warn("ucx4j shuffle: cannot serve {} block(s) of request {} from {} (the first: {})", count,
                        requestId, ep, first);
            }
        }
    }

    /**
     * From this size on a block is mapped; smaller ones are read into native memory. A mapping costs a page-table
     * setup and one of the kernel's {@code vm.max_map_count} (65530 by default) for as long as its sends run, and
     * thousands of small blocks in flight would exhaust that.
     */
    static final long MAP_MIN = 256 * 1024;

    /**
     * A mapping of a block's file region, unmapped when {@code arena} closes: a private (copy-on-write) one, which
     * UCX can register for RDMA (an InfiniBand or RoCE registration asks for write access, which a read-only mapping
     * refuses: openucx/ucx#4924) while nothing written to it could reach the file; where the file cannot be opened
     * for writing, a read-only one (fine for shared memory and TCP).
     */
    static MemorySegment mapFile(FileSegmentManagedBuffer f, Arena arena) throws IOException {
        java.nio.file.Path path = f.getFile().toPath();
        try (FileChannel ch = FileChannel.open(path, StandardOpenOption.READ, StandardOpenOption.WRITE)) {
            // a block past the file's end (a damaged or replaced file): mapping it through a writable channel would
            // extend the file with zeros, and serve them
            checkWithin(f, ch.size());
            return ch.map(FileChannel.MapMode.PRIVATE, f.getOffset(), f.getLength(), arena); // never written
        } catch (java.nio.file.FileSystemException e) { // no write permission, a read-only file system
            try (FileChannel ch = FileChannel.open(path, StandardOpenOption.READ)) {
                checkWithin(f, ch.size());
                return ch.map(FileChannel.MapMode.READ_ONLY, f.getOffset(), f.getLength(), arena);
            }
        }
    }

    private static void checkWithin(FileSegmentManagedBuffer f, long fileSize) throws java.io.EOFException {
        if (f.getOffset() < 0 || f.getLength() < 0 || f.getOffset() > fileSize - f.getLength()) {
            throw new java.io.EOFException(f.getFile() + " (" + fileSize + " bytes) ends before its block "
                    + f.getOffset() + "+" + f.getLength());
        }
    }

    /** A block read into pool memory (the caller frees it). */
    private MemorySegment read(ManagedBuffer block) throws IOException {
        MemorySegment into = pool.allocate(block.size());
        try {
            fill(block, into);
            return into;
        } catch (IOException | RuntimeException | Error e) {
            pool.free(into);
            throw e;
        }
    }

    /** Copies a block's bytes into {@code into} (its size) without passing them through the heap. */
    private static void fill(ManagedBuffer block, MemorySegment into) throws IOException {
        if (block instanceof FileSegmentManagedBuffer f) {
            try (FileChannel ch = FileChannel.open(f.getFile().toPath(), StandardOpenOption.READ)) {
                java.nio.ByteBuffer b = into.asByteBuffer();
                while (b.hasRemaining()) {
                    if (ch.read(b, f.getOffset() + b.position()) < 0) {
                        throw new java.io.EOFException(f.getFile() + " ends before its block " + f.getOffset()
                                + "+" + f.getLength());
                    }
                }
            }
            return;
        }
        into.copyFrom(MemorySegment.ofBuffer(block.nioByteBuffer()));
    }
}
