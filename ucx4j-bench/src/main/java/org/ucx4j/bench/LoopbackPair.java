package org.ucx4j.bench;

import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.ucx4j.Endpoint;
import org.ucx4j.Listener;
import org.ucx4j.ProgressMode;
import org.ucx4j.Ucx;
import org.ucx4j.UcxOptions;

/** One worker and an endpoint connected to it through its own listener (UCX's loopback): the benchmarks' setup. */
final class LoopbackPair implements AutoCloseable {
    final Ucx ucx;
    final Endpoint client;
    final Endpoint server;
    private final Listener listener;

    LoopbackPair(ProgressMode progress) throws Exception {
        ucx = Ucx.open(UcxOptions.defaults().withProgressMode(progress).withName("jmh"));
        CompletableFuture<Endpoint> accepted = new CompletableFuture<>();
        listener = ucx.listen("127.0.0.1", 0, accepted::complete);
        client = ucx.connect("127.0.0.1", listener.port(), Duration.ofSeconds(10));
        while (progress == ProgressMode.CALLER && !accepted.isDone()) {
            ucx.progress();
        }
        server = accepted.get(10, TimeUnit.SECONDS);
    }

    @Override
    public void close() {
        client.abort();
        server.abort();
        listener.close();
        ucx.close();
    }
}
