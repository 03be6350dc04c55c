package org.ucx4j.internal.engine;

import java.util.function.Consumer;

/** Engine-side state of one listener. */
public final class ListenerCore {
    final Engine engine;
    final Consumer<EndpointCore> onConnection;
    int slot = -1;
    long handle;
    int port;
    String bindAddress;
    volatile boolean closed;

    ListenerCore(Engine engine, Consumer<EndpointCore> onConnection) {
        this.engine = engine;
        this.onConnection = onConnection;
    }

    public int port() {
        return port;
    }

    public String bindAddress() {
        return bindAddress;
    }

    public boolean isClosed() {
        return closed;
    }

    public Engine engine() {
        return engine;
    }
}
