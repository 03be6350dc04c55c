package org.apache.spark.shuffle.ucx4j;

import java.io.IOException;

import org.apache.spark.network.shuffle.BlockFetchingListener;
import org.apache.spark.network.shuffle.BlockStoreClient;
import org.apache.spark.network.shuffle.BlockTransferListener;
import org.apache.spark.network.shuffle.DownloadFileManager;
import org.apache.spark.network.shuffle.ErrorHandler;
import org.apache.spark.network.shuffle.RetryingBlockTransferor;

/**
 * Spark's block-fetch client interface over ucx4j: {@link org.apache.spark.storage.ShuffleBlockFetcherIterator}
 * drives it exactly as it drives Netty's, so flow control (bytes and requests in flight), corruption checks, fetch
 * metrics and {@code FetchFailedException} all stay Spark's own. Blocks are received into ucx4j's native memory,
 * never the heap; where Spark asks for them on disk ({@code downloadFileManager}, for requests above
 * {@code spark.network.maxRemoteBlockSizeFetchToMem}) they are streamed into its download files in parts.
 *
 * <p>Failures are retried as Netty's client retries them, by Spark's own {@link RetryingBlockTransferor}: an I/O
 * failure (the connection lost or never made, no data for {@code spark.shuffle.io.connectionTimeout}, no memory
 * for a block on this side) asks again for every block not yet delivered, up to {@code spark.shuffle.io.maxRetries} times
 * {@code spark.shuffle.io.retryWait} apart (on a new connection where the old one failed or stalled); so a live
 * executor that dropped one connection, or was slow to answer once (a long GC pause), is not taken for lost, which
 * would cost Spark every map output on it. Not retried: a block the server refused (it cannot read it), as Netty
 * does not retry a server's failure; blocks handed to Spark's own client, which retries by itself; and blocks of
 * an executor that the driver named a ucx4j server of before and has dropped since (it is gone).
 */
final class UcxBlockClient extends BlockStoreClient {
    private final UcxShuffleTransport transport;

    UcxBlockClient(UcxShuffleTransport transport) {
        this.transport = transport;
    }

    @Override
    public void fetchBlocks(String host, int port, String execId, String[] blockIds, BlockFetchingListener listener,
            DownloadFileManager downloadFileManager) {
        try {
            if (transport.servedByNetty(execId, false)) {
                nettyClient().fetchBlocks(host, port, execId, blockIds, listener, downloadFileManager);
                return;
            }
            Fetch fetch = new Fetch(host, port, execId, downloadFileManager);
            new RetryingBlockTransferor(transport.transportConf(), fetch, blockIds, listener, fetch).start();
        } catch (Throwable t) { // as Netty's client does: every block hears of it, the task thread does not
            failAll(blockIds, listener, new IOException("ucx4j shuffle: fetch from executor " + execId + " failed: "
                    + t, t));
        }
    }

    /** One {@code fetchBlocks} call: starts each try, and says which failures are worth another. */
    private final class Fetch implements RetryingBlockTransferor.BlockTransferStarter, ErrorHandler {
        private final String host;
        private final int port;
        private final String execId;
        private final DownloadFileManager toDisk;
        /** No more tries: the blocks went to Spark's own client (which retries by itself), or the executor is gone. */
        private volatile boolean settled;
        /** A try reached the executor's block server. */
        private volatile boolean reached;

        Fetch(String host, int port, String execId, DownloadFileManager toDisk) {
            this.host = host;
            this.port = port;
            this.execId = execId;
            this.toDisk = toDisk;
        }

        @Override
        public void createAndStart(String[] blockIds, BlockTransferListener transferListener) {
            BlockFetchingListener listener = (BlockFetchingListener) transferListener; // Spark's retrying one is
            PeerConnection c = transport.cachedPeer(execId);
            if (c != null && c.fetch(transport.nextRequestId(), blockIds, listener, toDisk)) {
                reached = true;
                return;
            }
            // first contact (or the connection just retired or failed): the driver lookup and the connect block, so
            // they run off the task thread
            Thread.ofVirtual().name("ucx4j-shuffle-connect-" + execId)
                    .start(() -> connectAndFetch(blockIds, listener));
        }

        private void connectAndFetch(String[] blockIds, BlockFetchingListener listener) {
            try {
                for (int tries = 1; ; tries++) {
                    if (transport.servedByNetty(execId, true)) {
                        settled = true;
                        if (reached || transport.servedOverUcxBefore(execId)) {
                            // it served this fetch (or, as the driver said, this executor) over ucx4j before, and
                            // the driver has dropped it since: gone
                            throw new IOException("the executor is gone (the driver no longer knows its server)");
                        }
                        // no UCX there, or blocks migrated to it: Spark's own client fetches them
                        nettyClient().fetchBlocks(host, port, execId, blockIds, plain(listener), toDisk);
                        return;
                    }
                    if (transport.peer(execId).fetch(transport.nextRequestId(), blockIds, listener, toDisk)) {
                        reached = true;
                        return;
                    }
                    if (tries == 3) { // retired between the look-up and the request, three times over
                        throw new IOException("its connections were retired as the requests were made");
                    }
                }
            } catch (Throwable t) {
                failAll(blockIds, listener, new IOException("ucx4j shuffle: cannot reach executor " + execId
                        + " (block manager " + host + ":" + port + "): " + t.getMessage(), t));
            }
        }

        @Override
        public boolean shouldRetryError(Throwable t) {
            return !settled && !(t instanceof BlockRefusedException) && !transport.isStopped();
        }
    }

    /**
     * Spark asks the server why a block failed its checksum twice (disk or network); ucx4j's servers answer only
     * fetches, and every executor's Netty block service answers this.
     */
    @Override
    public org.apache.spark.network.shuffle.checksum.Cause diagnoseCorruption(String host, int port, String execId,
            int shuffleId, long mapId, int reduceId, long checksum, String algorithm) {
        return nettyClient().diagnoseCorruption(host, port, execId, shuffleId, mapId, reduceId, checksum, algorithm);
    }

    /** Spark's own block transfer client, for executors that serve no ucx4j block server. */
    private static BlockStoreClient nettyClient() {
        return org.apache.spark.SparkEnv.get().blockManager().blockStoreClient();
    }

    /**
     * The listener as a plain one: Spark's client wraps what it is given in a retrying listener of its own, which
     * asks its parent for a name that Spark's retrying listener refuses to give.
     */
    private static BlockFetchingListener plain(BlockFetchingListener l) {
        return new BlockFetchingListener() {
            @Override
            public void onBlockFetchSuccess(String blockId, org.apache.spark.network.buffer.ManagedBuffer data) {
                l.onBlockFetchSuccess(blockId, data);
            }

            @Override
            public void onBlockFetchFailure(String blockId, Throwable e) {
                l.onBlockFetchFailure(blockId, e);
            }
        };
    }

    private static void failAll(String[] blockIds, BlockFetchingListener listener, IOException e) {
        for (String id : blockIds) {
            listener.onBlockFetchFailure(id, e);
        }
    }

    /** A block its server answered it cannot serve (it could not read it): Spark decides, nothing is retried. */
    static final class BlockRefusedException extends IOException {
        BlockRefusedException(String message) {
            super(message);
        }
    }

    @Override
    public void close() {
        // connections belong to the transport
    }
}
