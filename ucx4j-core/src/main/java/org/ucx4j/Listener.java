package org.ucx4j;

import org.ucx4j.internal.engine.ListenerCore;

/**
 * Accepts connections on a TCP port (ucx4j's handshake, then UCX endpoints by worker address). Closing it keeps
 * accepted endpoints.
 */
public final class Listener implements AutoCloseable {
    private final ListenerCore core;
    /** Told when this listener closes (the {@code Ucx} forgets it). */
    private final java.util.function.Consumer<Listener> onClose;

    Listener(ListenerCore core, java.util.function.Consumer<Listener> onClose) {
        this.core = core;
        this.onClose = onClose;
    }

    /** {@return the bound port (the ephemeral one when listening on port 0)} */
    public int port() {
        return core.port();
    }

    /** {@return the bound address, as a host string (the wildcard address when listening on all interfaces)} */
    public String bindAddress() {
        return core.bindAddress();
    }

    /** {@return true once this listener, or the {@link Ucx} instance it belongs to, is closed} */
    public boolean isClosed() {
        return core.isClosed() || core.engine().isTerminated();
    }

    /** Stops accepting; idempotent; endpoints already accepted stay open. */
    @Override
    public void close() {
        core.close();
        onClose.accept(this);
    }

    @Override
    public String toString() {
        return "Listener[" + bindAddress() + ":" + port() + (isClosed() ? " closed" : "") + "]";
    }
}
