package org.ucx4j;

/**
 * Serves one accepted connection. Each call runs on its own virtual thread, so blocking calls are cheap. The
 * endpoint stays open when the handler returns; if the handler throws, the endpoint is aborted and the error logged.
 */
@FunctionalInterface
public interface ConnectionHandler {
    void onConnection(Endpoint endpoint) throws Exception;
}
