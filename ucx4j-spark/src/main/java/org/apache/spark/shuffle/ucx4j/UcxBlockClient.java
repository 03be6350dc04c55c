package org.apache.spark.shuffle.ucx4j;

import java.io.IOException;

import org.apache.spark.network.shuffle.BlockFetchingListener;
import org.apache.spark.network.shuffle.BlockStoreClient;
import org.apache.spark.network.shuffle.DownloadFileManager;

/**
 * Spark's block-fetch client interface over ucx4j: {@link org.apache.spark.storage.ShuffleBlockFetcherIterator}
 * drives it exactly as it drives Netty's, so flow control (bytes and requests in flight), corruption checks, fetch
 * metrics and {@code FetchFailedException} all stay Spark's own. Blocks are always received into ucx4j's native
 * memory, never the heap, so the fetch-to-disk path ({@code downloadFileManager}) is not needed and not used.
 */
final class UcxBlockClient extends BlockStoreClient {
    private final UcxShuffleTransport transport;

    UcxBlockClient(UcxShuffleTransport transport) {
        this.transport = transport;
    }

    @Override
    public void fetchBlocks(String host, int port, String execId, String[] blockIds, BlockFetchingListener listener,
            DownloadFileManager downloadFileManager) {
        PeerConnection c = transport.cachedPeer(execId);
        if (c != null) {
            c.fetch(transport.nextRequestId(), blockIds, listener);
            return;
        }
        // first contact: the driver lookup and the connect block, so they run off the task thread
        Thread.ofVirtual().name("ucx4j-shuffle-connect-" + execId).start(() -> {
            PeerConnection peer;
            try {
                peer = transport.peer(execId);
            } catch (Throwable t) {
                IOException e = new IOException("ucx4j shuffle: cannot reach executor " + execId + " (block manager "
                        + host + ":" + port + "): " + t.getMessage(), t);
                for (String id : blockIds) {
                    listener.onBlockFetchFailure(id, e);
                }
                return;
            }
            peer.fetch(transport.nextRequestId(), blockIds, listener);
        });
    }

    @Override
    public void close() {
        // connections belong to the transport
    }
}
