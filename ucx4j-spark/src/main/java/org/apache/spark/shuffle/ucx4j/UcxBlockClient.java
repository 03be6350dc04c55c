package org.apache.spark.shuffle.ucx4j;

import java.io.IOException;

import org.apache.spark.network.shuffle.BlockFetchingListener;
import org.apache.spark.network.shuffle.BlockStoreClient;
import org.apache.spark.network.shuffle.DownloadFileManager;

/**
 * Spark's block-fetch client interface over ucx4j: {@link org.apache.spark.storage.ShuffleBlockFetcherIterator}
 * drives it exactly as it drives Netty's, so flow control (bytes and requests in flight), corruption checks, fetch
 * metrics and {@code FetchFailedException} all stay Spark's own. Blocks are received into ucx4j's native memory,
 * never the heap; where Spark asks for them on disk ({@code downloadFileManager}, for requests above
 * {@code spark.network.maxRemoteBlockSizeFetchToMem}) they are streamed into its download files in parts.
 */
final class UcxBlockClient extends BlockStoreClient {
    private static final org.slf4j.Logger LOG = org.slf4j.LoggerFactory.getLogger(UcxBlockClient.class);
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
            PeerConnection c = transport.cachedPeer(execId);
            if (c != null && c.fetch(transport.nextRequestId(), blockIds, listener, downloadFileManager)) {
                return;
            }
            // first contact (or the connection just retired): the driver lookup and the connect block, so they run
            // off the task thread
            Thread.ofVirtual().name("ucx4j-shuffle-connect-" + execId).start(
                    () -> connectAndFetch(host, port, execId, blockIds, listener, downloadFileManager));
        } catch (Throwable t) { // as Netty's client does: every block hears of it, the task thread does not
            failAll(blockIds, listener, new IOException("ucx4j shuffle: fetch from executor " + execId + " failed: "
                    + t, t));
        }
    }

    /**
     * Connects and sends the request. Setting up the connection is retried as Netty's client retries it
     * ({@code spark.shuffle.io.maxRetries} more tries, {@code spark.shuffle.io.retryWait} apart), so a peer that
     * was slow to answer once (a long GC pause, a full accept backlog) is not taken for lost, which would cost
     * Spark every map output on it; a failed answer is never retried here (Spark decides about those).
     */
    private void connectAndFetch(String host, int port, String execId, String[] blockIds,
            BlockFetchingListener listener, DownloadFileManager downloadFileManager) {
        int retries = transport.connectRetries();
        for (int attempt = 0; ; attempt++) {
            try {
                if (transport.servedByNetty(execId, true)) { // no UCX there: Spark's own client fetches them
                    nettyClient().fetchBlocks(host, port, execId, blockIds, listener, downloadFileManager);
                    return;
                }
                PeerConnection peer = transport.peer(execId);
                if (peer.fetch(transport.nextRequestId(), blockIds, listener, downloadFileManager)) {
                    return;
                }
                throw new IOException("the connection was retired as the request was made");
            } catch (Throwable t) {
                if (attempt >= retries || t instanceof InterruptedException || transport.isStopped()) {
                    failAll(blockIds, listener, new IOException("ucx4j shuffle: cannot reach executor " + execId
                            + " (block manager " + host + ":" + port + ") after " + (attempt + 1) + " tries: "
                            + t.getMessage(), t));
                    return;
                }
                LOG.info("ucx4j shuffle: connecting to executor {} failed ({}), retrying in {} ms ({} of {})",
                        execId, t.toString(), transport.connectRetryWaitMillis(), attempt + 1, retries);
                try {
                    Thread.sleep(transport.connectRetryWaitMillis());
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    failAll(blockIds, listener, new IOException("ucx4j shuffle: interrupted while connecting to "
                            + "executor " + execId, e));
                    return;
                }
            }
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

    private static void failAll(String[] blockIds, BlockFetchingListener listener, IOException e) {
        for (String id : blockIds) {
            listener.onBlockFetchFailure(id, e);
        }
    }

    @Override
    public void close() {
        // connections belong to the transport
    }
}
