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
    private final UcxShuffleTransport transport;

    UcxBlockClient(UcxShuffleTransport transport) {
        this.transport = transport;
    }

    @Override
    public void fetchBlocks(String host, int port, String execId, String[] blockIds, BlockFetchingListener listener,
            DownloadFileManager downloadFileManager) {
        PeerConnection c = transport.cachedPeer(execId);
        if (c != null) {
            c.fetch(transport.nextRequestId(), blockIds, listener, downloadFileManager);
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
            peer.fetch(transport.nextRequestId(), blockIds, listener, downloadFileManager);
        });
    }

    @Override
    public void close() {
        // connections belong to the transport
    }
}
