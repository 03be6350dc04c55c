package org.apache.spark.shuffle.ucx4j;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.BitSet;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.Consumer;

import org.apache.spark.network.buffer.ManagedBuffer;
import org.apache.spark.network.shuffle.BlockFetchingListener;
import org.apache.spark.network.shuffle.DownloadFile;
import org.apache.spark.network.shuffle.DownloadFileManager;
import org.apache.spark.network.util.TransportConf;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.ucx4j.AmMessage;
import org.ucx4j.Endpoint;
import org.ucx4j.MessageDroppedException;
import org.ucx4j.UcxTimeoutException;

/**
 * One reducer-side connection to one executor's block server, shared by all tasks of this executor. Requests are
 * pipelined; a virtual thread receives the answers and hands each block to its request's listener as it lands.
 * When the connection fails (the peer died: UCX reports it within seconds) or a request sees no data, and the
 * connection none either, for {@code spark.shuffle.io.connectionTimeout}, every block still outstanding is
 * failed: the client asks again on a new connection ({@link UcxBlockClient}), and once its retries are spent Spark turns the failure into a
 * {@code FetchFailedException} and a map-stage retry. Blocks Spark wants on disk (it passes a
 * {@link DownloadFileManager} for requests above {@code spark.network.maxRemoteBlockSizeFetchToMem}) arrive in parts
 * that are written to Spark's temporary download file as they land, in order, so memory stays bounded.
 */
final class PeerConnection {
    private static final Logger LOG = LoggerFactory.getLogger(PeerConnection.class);
    private static final Duration TICK = Duration.ofSeconds(1);
    /** This JVM's connections that failed with requests in flight (their peer died, or the link broke). */
    private static final java.util.concurrent.atomic.AtomicLong LOST_WITH_REQUESTS =
            new java.util.concurrent.atomic.AtomicLong();

    private final UcxDriverEndpoint.Address peer;
    private final Endpoint ep;
    private final long timeoutNanos;
    /** Told when this connection must take no new requests: it failed, or its server is being replaced. */
    private final Consumer<PeerConnection> onUnusable;
    private final TransportConf transportConf;
    private final Map<Long, Pending> pending = new ConcurrentHashMap<>();
    private volatile Throwable failure;
    private volatile boolean closing;
    /** Takes no new requests; closes once the ones in flight are answered. */
    private volatile boolean retiring;
    /** When the last message came on this connection (nanoTime): a request waits quietly while others are served. */
    private volatile long lastTraffic = System.nanoTime();

    PeerConnection(UcxDriverEndpoint.Address peer, Endpoint ep, Duration timeout, TransportConf transportConf,
            Consumer<PeerConnection> onUnusable) {
        this.peer = peer;
        this.transportConf = transportConf;
        this.ep = ep;
        this.timeoutNanos = timeout.toNanos();
        this.onUnusable = onUnusable;
        Thread.ofVirtual().name("ucx4j-shuffle-recv-" + peer.executorId()).start(this::receiveLoop);
    }

    Endpoint endpoint() {
        return ep;
    }

    /** {@return how many of this JVM's connections failed with requests in flight} (diagnostics, tests) */
    static long lostWithRequestsInFlight() {
        return LOST_WITH_REQUESTS.get();
    }

    UcxDriverEndpoint.Address peer() {
        return peer;
    }

    boolean isUsable() {
        return failure == null && !retiring && ep.isAlive();
    }

    /**
     * No new requests from now on (the server asked, or this side's UCX instance is being replaced): the owner
     * forgets this connection, and it closes gracefully once every request in flight is answered or failed.
     */
    void retire() {
        if (retiring) {
            return;
        }
        retiring = true;
        onUnusable.accept(this);
        closeIfRetiredAndIdle();
    }

    private void closeIfRetiredAndIdle() {
        synchronized (this) { // against fetch(): a request is either taken before the close starts, or refused
            if (!retiring || closing || !pending.isEmpty()) {
                return;
            }
            closing = true;
        }
        ep.closeAsync();
    }

    /**
     * Asks for {@code blockIds}; the listener hears about each block exactly once. With {@code toDisk} the blocks
     * are streamed into Spark's download files. Never blocks. False, with nothing sent and nobody told, when this
     * connection has been retired since it was looked up: the caller asks on a new one.
     */
    boolean fetch(long requestId, String[] blockIds, BlockFetchingListener listener, DownloadFileManager toDisk) {
        Pending p = new Pending(blockIds, listener, toDisk);
        synchronized (this) {
            if (retiring || closing) {
                return false;
            }
            pending.put(requestId, p);
        }
        Throwable failed = failure;
        if (failed != null) {
            fail(requestId, failed);
            return true;
        }
        byte[] names = String.join("\n", blockIds).getBytes(StandardCharsets.UTF_8);
        byte kind = toDisk == null ? Wire.FETCH : Wire.FETCH_TO_DISK;
        try {
            ep.amSendAsync(MemorySegment.ofArray(Wire.header(kind, requestId, blockIds.length)),
                    MemorySegment.ofArray(names)).whenComplete((v, t) -> {
                        if (t != null) {
                            fail(requestId, t);
                        }
                    });
        } catch (Throwable e) { // refused at once (the UCX instance closed meanwhile, out of memory): the blocks
            fail(requestId, e); // fail, once (an Error rethrown would have the caller fail them all again)
        }
        return true;
    }

    private void receiveLoop() {
        try {
            long nextCheck = System.nanoTime() + TICK.toNanos();
            while (true) {
                AmMessage m;
                try {
                    m = ep.amRecv(TICK);
                } catch (UcxTimeoutException tick) {
                    m = null;
                } catch (MessageDroppedException dropped) {
                    lastTraffic = System.nanoTime();
                    lost(dropped); // one block this side could not take (no memory): it fails alone
                    m = null;
                }
                if (m != null) {
                    lastTraffic = System.nanoTime();
                    deliver(m);
                }
                closeIfRetiredAndIdle();
                // every tick, busy or not (the loop may never time out while answers come)
                long now = System.nanoTime();
                if (now - nextCheck >= 0) {
                    expireStalled();
                    nextCheck = now + TICK.toNanos();
                }
            }
        } catch (Throwable t) {
            failure = t;
            if (!closing) {
                if (!pending.isEmpty()) {
                    LOST_WITH_REQUESTS.incrementAndGet();
                }
                LOG.warn("ucx4j shuffle: connection to {} failed with {} request(s) in flight: {}", describe(),
                        pending.size(), t.toString());
            }
            onUnusable.accept(this);
            for (Long id : pending.keySet()) {
                fail(id, t);
            }
            if (!closing) {
                ep.abort(); // (a retired connection closes gracefully: its server sees a goodbye, not a death)
            }
        }
    }

    private void deliver(AmMessage m) throws IOException {
        Wire.Header h;
        try {
            h = Wire.Header.parse(m.headerBytes());
        } catch (RuntimeException e) {
            m.close();
            throw new IOException("ucx4j shuffle: malformed answer from " + describe(), e);
        }
        if (h.kind() == Wire.GOAWAY) {
            m.close();
            LOG.info("ucx4j shuffle: {} is replacing its server; new requests go to its new address", describe());
            retire();
            return;
        }
        Pending p = pending.get(h.requestId());
        if (p == null || h.index() < 0 || h.index() >= p.blockIds.length) {
            m.close(); // an answer to a request already failed (timeout) or one we never made: drop it
            return;
        }
        p.lastActivity = System.nanoTime();
        String blockId = p.blockIds[h.index()];
        if (h.kind() == Wire.PART) {
            part(p, h, blockId, m);
        } else if (!p.claim(h.index())) {
            m.close();
        } else if (h.kind() == Wire.BLOCK && p.toDisk == null) {
            UcxManagedBuffer buf = new UcxManagedBuffer(m);
            try {
                p.listener.onBlockFetchSuccess(blockId, buf);
            } finally {
                buf.release(); // the listener retained it if it keeps it
            }
        } else {
            String why = h.kind() == Wire.ERROR ? new String(m.payloadBytes(), StandardCharsets.UTF_8)
                    : "unexpected message kind " + h.kind();
            m.close();
            p.discard(h.index());
            p.listener.onBlockFetchFailure(blockId, new UcxBlockClient.BlockRefusedException("ucx4j shuffle: "
                    + describe() + " could not serve " + blockId + ": " + why));
        }
        if (p.isDone()) {
            pending.remove(h.requestId(), p);
        }
    }

    /** A block (or a part of one) whose message was dropped on arrival: that block fails, the rest go on. */
    private void lost(MessageDroppedException dropped) throws IOException {
        Wire.Header h;
        try {
            h = Wire.Header.parse(dropped.header());
        } catch (RuntimeException e) {
            throw new IOException("ucx4j shuffle: lost an answer from " + describe() + " that cannot be matched to "
                    + "a request", dropped);
        }
        Pending p = pending.get(h.requestId());
        if (p == null || h.index() < 0 || h.index() >= p.blockIds.length) {
            return;
        }
        p.lastActivity = System.nanoTime();
        if (p.failBlock(h.index())) {
            String blockId = p.blockIds[h.index()];
            p.listener.onBlockFetchFailure(blockId, new IOException("ucx4j shuffle: could not take " + blockId
                    + " from " + describe() + ": " + dropped.getMessage(), dropped));
        }
        if (p.isDone()) {
            pending.remove(h.requestId(), p);
        }
    }

    /** Writes one part of a to-disk block; the block goes to the listener once all its bytes are on disk. */
    private void part(Pending p, Wire.Header h, String blockId, AmMessage m) {
        Pending.Finished done;
        try {
            done = p.write(h.index(), h.offset(), h.blockSize(), m, transportConf);
        } catch (IOException | RuntimeException e) {
            boolean mine = p.failBlock(h.index());
            if (e instanceof Pending.ClaimedFailure || mine) {
                p.listener.onBlockFetchFailure(blockId, e instanceof IOException io ? io
                        : new IOException("ucx4j shuffle: bad part of " + blockId + " from " + describe(), e));
            }
            return;
        }
        if (done != null) {
            p.listener.onBlockFetchSuccess(blockId, done.buffer());
            if (!p.toDisk.registerTempFileToClean(done.file())) {
                done.file().delete(); // the task is over: Spark will not clean it up
            }
        }
    }

    /**
     * Fails every request that got no data for {@code spark.shuffle.io.connectionTimeout} (by default
     * {@code spark.network.timeout}) while the connection got none either,
     * and retires the connection, so that the retries go to a new one (as Netty closes a channel that stays quiet
     * with requests outstanding). A request waiting behind others is not stalled while their data comes: the
     * server answers a connection's requests one after another, and a long to-disk stream can hold later ones up.
     */
    private void expireStalled() {
        long now = System.nanoTime();
        if (timeoutNanos == 0 || now - lastTraffic <= timeoutNanos) { // zero: no idle timeout (as Netty's)
            return;
        }
        java.util.List<Long> stalled = new java.util.ArrayList<>();
        for (Map.Entry<Long, Pending> e : pending.entrySet()) {
            if (now - e.getValue().lastActivity > timeoutNanos) {
                stalled.add(e.getKey());
            }
        }
        if (stalled.isEmpty()) {
            return;
        }
        // retired before the failures go out: a retry made from a failure callback must not land here again
        retire();
        for (long requestId : stalled) {
            fail(requestId, new IOException("ucx4j shuffle: no data from " + describe() + " for "
                    + Duration.ofNanos(timeoutNanos).toMillis() / 1000.0 + " s (" + UcxShuffleConf.CONNECTION_TIMEOUT
                    + ", by default spark.network.timeout)"));
        }
        closeIfRetiredAndIdle();
    }

    /** Fails every block of the request that has not been delivered yet. */
    private void fail(long requestId, Throwable cause) {
        Pending p = pending.remove(requestId);
        if (p == null) {
            return;
        }
        IOException e = cause instanceof IOException io ? io
                : new IOException("ucx4j shuffle: fetch from " + describe() + " failed: " + cause.getMessage(), cause);
        for (int i = 0; i < p.blockIds.length; i++) {
            if (p.failBlock(i)) {
                p.listener.onBlockFetchFailure(p.blockIds[i], e);
            }
        }
    }

    /** Shutting down: pending fetches fail (their tasks are being killed anyway); nothing waits. */
    void close() {
        closing = true;
        ep.abort();
    }

    String describe() {
        return "executor " + peer.executorId() + " (" + peer.host() + ":" + peer.port() + ")";
    }

    @Override
    public String toString() {
        return "PeerConnection[" + describe() + (failure == null ? "" : ", failed: " + failure) + "]";
    }

    /** One fetch request: which blocks were answered (success or failure), each exactly once. */
    private static final class Pending {
        final String[] blockIds;
        final BlockFetchingListener listener;
        final DownloadFileManager toDisk;
        final BitSet answered;
        volatile long lastActivity = System.nanoTime();
        private int left;
        private final Map<Integer, Download> downloads = new HashMap<>();

        Pending(String[] blockIds, BlockFetchingListener listener, DownloadFileManager toDisk) {
            this.blockIds = blockIds;
            this.listener = listener;
            this.toDisk = toDisk;
            this.answered = new BitSet(blockIds.length);
            this.left = blockIds.length;
        }

        synchronized boolean claim(int i) {
            if (answered.get(i)) {
                return false;
            }
            answered.set(i);
            left--;
            return true;
        }

        synchronized boolean isDone() {
            return left == 0;
        }

        /** A block written to disk: Spark's buffer over the file, and the file to register for clean-up. */
        record Finished(ManagedBuffer buffer, DownloadFile file) {
        }

        /**
         * Takes one part (and closes its message): written at once if it is the next, held until then if it came
         * early. Returns the block, claimed, once all of it is on disk; null while parts are missing.
         */
        synchronized Finished write(int index, long offset, long blockSize, AmMessage m, TransportConf conf)
                throws IOException {
            if (toDisk == null || answered.get(index)) {
                m.close(); // a part of a block already failed, or one we did not ask to stream: drop it
                return null;
            }
            Download d = downloads.get(index);
            if (d == null) {
                try {
                    DownloadFile file = toDisk.createTempFile(conf);
                    d = new Download(file, file.openForWriting(), blockSize, blockIds[index]);
                } catch (IOException | RuntimeException e) {
                    m.close();
                    throw e;
                }
                downloads.put(index, d);
            }
            if (!d.accept(new Download.Part(offset, blockSize, m.payload(), m)) || !claim(index)) {
                return null;
            }
            downloads.remove(index);
            try {
                return new Finished(d.channel.closeAndRead(), d.file);
            } catch (IOException | RuntimeException e) {
                d.discard();
                throw new ClaimedFailure("ucx4j shuffle: could not finish the download of " + blockIds[index], e);
            }
        }

        /** A block that failed after it was claimed: its listener still hears about it, once. */
        static final class ClaimedFailure extends IOException {
            ClaimedFailure(String message, Throwable cause) {
                super(message, cause);
            }
        }

        /**
         * Claims a block to fail it and drops its partial download, in one step: a part arriving meanwhile cannot
         * start a new download that nobody would discard. True when the caller is the one to tell the listener.
         */
        synchronized boolean failBlock(int index) {
            boolean mine = claim(index);
            discard(index);
            return mine;
        }

        /** Drops a block's partial download: its channel, its file and any parts held. */
        synchronized void discard(int index) {
            Download d = downloads.remove(index);
            if (d != null) {
                d.discard();
            }
        }
    }

}
