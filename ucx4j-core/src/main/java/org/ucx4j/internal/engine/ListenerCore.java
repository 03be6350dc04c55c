package org.ucx4j.internal.engine;

import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.util.concurrent.Semaphore;
import java.util.function.Consumer;

/** Engine-side state of one listener: the bound socket that accepts handshakes. */
public final class ListenerCore {
    final Engine engine;
    final Consumer<EndpointCore> onConnection;
    final ServerSocket socket;
    /** One permit per handshake this listener may run at once; an accepted connection holds one until it ends. */
    final Semaphore handshakes;
    private volatile boolean closed;

    ListenerCore(Engine engine, Consumer<EndpointCore> onConnection, ServerSocket socket) {
        this.engine = engine;
        this.onConnection = onConnection;
        this.socket = socket;
        this.handshakes = new Semaphore(engine.maxHandshakes);
    }

    public int port() {
        return socket.getLocalPort();
    }

    public String bindAddress() {
        InetSocketAddress a = (InetSocketAddress) socket.getLocalSocketAddress();
        return a == null ? "" : a.getHostString();
    }

    public boolean isClosed() {
        return closed;
    }

    public Engine engine() {
        return engine;
    }

    /**
     * Hands a connection whose handshake finished to the application, unless this listener is closed: atomic with
     * {@link #close}, so no handler starts once {@code close()} has returned.
     */
    synchronized boolean handOver(EndpointCore c) {
        if (closed) {
            return false;
        }
        onConnection.accept(c); // starts the handler's thread: quick
        return true;
    }

    /** Stops accepting; idempotent. Endpoints already accepted stay open, and no handler starts after it returns. */
    public void close() {
        synchronized (this) {
            closed = true;
        }
        Bootstrap.closeQuietly(socket);
        engine.connections.untrack(this);
    }
}
