package org.ucx4j.examples;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Arrays;
import java.util.function.Consumer;
import org.ucx4j.Endpoint;
import org.ucx4j.TagMessage;
import org.ucx4j.Ucx;
import org.ucx4j.WorkerAddress;

/**
 * A ping-pong between two workers that know each other only by UCX worker address (UCX-Py's
 * {@code create_endpoint_from_worker_address}): no listener, no ucx4j handshake, tags exactly as given, so either
 * side could as well be a C, UCX-Py or JUCX program. The server publishes its address; the client connects to it
 * and sends its own address first, so the server can connect back; then 8-byte pings are answered by pongs.
 *
 * <pre>
 * ./scripts/example AddressPingPong server /tmp/ucx4j.addr 100000 &amp;
 * ./scripts/example AddressPingPong client /tmp/ucx4j.addr 100000
 * </pre>
 */
public final class AddressPingPong {
    static final int HELLO = 1, PING = 2, PONG = 3;
    private static final Duration T = Duration.ofSeconds(30);

    private AddressPingPong() {}

    public static void main(String[] args) throws Exception {
        if (args.length < 2 || !(args[0].equals("server") || args[0].equals("client"))) {
            System.err.println("usage: AddressPingPong server|client ADDRESS_FILE [ITERATIONS]");
            System.exit(2);
        }
        Path file = Path.of(args[1]);
        int iters = args.length > 2 ? Integer.parseInt(args[2]) : 10_000;
        try (Ucx ucx = Ucx.open()) {
            if (args[0].equals("server")) {
                Files.deleteIfExists(file);
                serve(ucx, iters, address -> write(file, address));
                System.out.println("served " + iters + " pings");
            } else {
                WorkerAddress server = read(file);
                long[] ns = ping(ucx, server, iters);
                Arrays.sort(ns);
                System.out.printf("%d round trips of 8 B: median %.2f us, p99 %.2f us%n", iters,
                        ns[ns.length / 2] / 1e3, ns[(int) (ns.length * 0.99)] / 1e3);
            }
        }
    }

    /** Publishes this worker's address, waits for a client's hello, then answers {@code iters} pings. */
    public static void serve(Ucx ucx, int iters, Consumer<WorkerAddress> publish) {
        publish.accept(ucx.workerAddress());
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment hello = arena.allocate(4096);
            TagMessage m = ucx.recvTagged(hello, HELLO, -1L, T); // a worker-level receive: from any peer
            WorkerAddress client = WorkerAddress.of(hello.asSlice(0, m.length()).toArray(ValueLayout.JAVA_BYTE));
            try (Endpoint back = ucx.connect(client)) {
                MemorySegment buf = arena.allocate(8);
                for (int i = 0; i < iters; i++) {
                    back.recv(buf, PING, T);
                    back.send(buf, PONG, T);
                }
            }
        }
    }

    /** Connects to {@code server}, says hello with this worker's address, and times {@code iters} round trips. */
    public static long[] ping(Ucx ucx, WorkerAddress server, int iters) {
        long[] ns = new long[iters];
        try (Endpoint ep = ucx.connect(server); Arena arena = Arena.ofConfined()) {
            ep.send(ucx.workerAddress().toBytes(), HELLO);
            MemorySegment out = arena.allocate(8), in = arena.allocate(8);
            for (int i = 0; i < iters; i++) {
                out.set(ValueLayout.JAVA_LONG, 0, i);
                long t0 = System.nanoTime();
                ep.send(out, PING, T);
                ep.recv(in, PONG, T);
                ns[i] = System.nanoTime() - t0;
                if (in.get(ValueLayout.JAVA_LONG, 0) != i) {
                    throw new IllegalStateException("pong " + i + " carried " + in.get(ValueLayout.JAVA_LONG, 0));
                }
            }
        }
        return ns;
    }

    private static void write(Path file, WorkerAddress address) {
        try {
            Path tmp = file.resolveSibling(file.getFileName() + ".tmp");
            Files.writeString(tmp, address.toHex());
            Files.move(tmp, file, java.nio.file.StandardCopyOption.ATOMIC_MOVE); // never seen half-written
        } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
    }

    private static WorkerAddress read(Path file) throws Exception {
        long deadline = System.nanoTime() + T.toNanos();
        while (!Files.exists(file)) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("no server address in " + file + " after " + T.toSeconds() + " s");
            }
            Thread.sleep(50);
        }
        return WorkerAddress.fromHex(Files.readString(file));
    }
}
