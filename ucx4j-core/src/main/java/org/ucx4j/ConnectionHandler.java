package org.ucx4j;

/**
 * Serves one accepted connection. Each call runs on its own virtual thread, so blocking calls are cheap. The
 * endpoint stays open when the handler returns; if the handler throws, the endpoint is aborted and the error logged.
 */
@FunctionalInterface
public interface ConnectionHandler {
    /**
     * Serves one accepted connection.
     *
     * @param endpoint the accepted endpoint; it stays open when this returns, so close it when done with it
     * @throws Exception any failure: an endpoint still alive is then aborted and the error logged
     */
    void onConnection(Endpoint endpoint) throws Exception;
}
