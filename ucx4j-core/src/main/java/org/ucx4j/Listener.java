package org.ucx4j;

import org.ucx4j.internal.engine.ListenerCore;

/** Accepts connections on a TCP port (ucx4j's handshake, then UCX endpoints by worker address). Closing it keeps accepted endpoints. */
public final class Listener implements AutoCloseable {
    private final ListenerCore core;

    Listener(ListenerCore core) {
        this.core = core;
    }

    /** The bound port (the ephemeral one when listening on port 0). */
    public int port() {
        return core.port();
    }

    /** The bound address. */
    public String bindAddress() {
        return core.bindAddress();
    }

    public boolean isClosed() {
        return core.isClosed() || core.engine().isTerminated();
    }

    /** Stops accepting; idempotent; endpoints already accepted stay open. */
    @Override
    public void close() {
        core.close();
    }

    @Override
    public String toString() {
        return "Listener[" + bindAddress() + ":" + port() + (isClosed() ? " closed" : "") + "]";
    }
}
