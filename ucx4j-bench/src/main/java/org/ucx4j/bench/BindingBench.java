package org.ucx4j.bench;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Warmup;
import org.ucx4j.AmMessage;
import org.ucx4j.Endpoint;
import org.ucx4j.ProgressMode;
import org.ucx4j.Ucx;

/**
 * The binding's own overheads, one thread, one worker in caller-progress mode, an endpoint connected to the same
 * worker (UCX's loopback). Run with {@code -prof gc} to see bytes allocated per operation.
 */
@State(Scope.Thread)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(value = 1, jvmArgsAppend = "--enable-native-access=ALL-UNNAMED")
public class BindingBench {
    static final MemorySegment EMPTY = MemorySegment.ofArray(new byte[0]);
    /**
     * CALLER: this thread owns the worker. BACKOFF: a progress thread owns it, and each blocking call borrows it
     * for the call (the lending overhead a program using the default mode pays per call).
     */
    @Param({"CALLER", "BACKOFF"})
    public ProgressMode progress;

    LoopbackPair pair;
    Ucx ucx;
    Endpoint client;
    Endpoint server;
    Arena arena;
    MemorySegment out;
    MemorySegment in;
    MemorySegment out4k;
    MemorySegment in4k;

    @Setup(Level.Trial)
    public void setup() throws Exception {
        pair = new LoopbackPair(progress);
        ucx = pair.ucx;
        client = pair.client;
        server = pair.server;
        arena = Arena.ofShared();
        out = arena.allocate(8);
        in = arena.allocate(8);
        out4k = arena.allocate(4096);
        in4k = arena.allocate(4096);
    }

    @TearDown(Level.Trial)
    public void tearDown() {
        pair.close();
        arena.close();
    }

    /** One {@code ucp_worker_progress} with nothing to do, plus the engine's queue and deferred-work checks. */
    @Benchmark
    public int idleProgress() {
        if (progress != ProgressMode.CALLER) {
            return 0; // only the owner thread may progress
        }
        return ucx.progress();
    }

    /** Blocking 8-byte send and receive on a loopback pair: the target is 0 bytes allocated per operation. */
    @Benchmark
    public long sendRecvBlocking() {
        client.send(out, 1);
        return server.recv(in, 1);
    }

    /**
     * Blocking 4 KiB send and receive: above UCX's short protocol, so the send is an operation (posted by the thread
     * that owns or borrows the worker for the call) that UCX's eager protocol completes inside the post.
     */
    @Benchmark
    public long sendRecvBlocking4KiB() {
        client.send(out4k, 4);
        return server.recv(in4k, 4);
    }

    /** Blocking 8-byte active message and receiver-allocated receive (the AM upcall, allocation and copy-in). */
    @Benchmark
    public long amSendRecvBlocking() {
        client.amSend(EMPTY, out);
        try (AmMessage m = server.amRecv()) {
            return m.payload().byteSize();
        }
    }

    /** Blocking 8-byte stream send and exact-length stream receive. */
    @Benchmark
    public long streamSendRecvBlocking() {
        client.streamSend(out);
        return server.streamRecv(in);
    }

    /** An asynchronous send (completed inside the call) and a blocking receive: a message-rate loop's two sides. */
    @Benchmark
    public long sendAsyncRecvBlocking() {
        CompletableFuture<Long> s = client.sendAsync(out, 3);
        return server.recv(in, 3) + (s.isDone() ? 0 : 1);
    }

    /** The async forms: the only allocation should be the futures handed back. */
    @Benchmark
    public long sendRecvAsync() {
        CompletableFuture<Long> r = server.recvAsync(in, 2);
        CompletableFuture<Long> s = client.sendAsync(out, 2);
        while (progress == ProgressMode.CALLER && (!r.isDone() || !s.isDone())) {
            ucx.progress();
        }
        return r.join() + s.join();
    }
}
