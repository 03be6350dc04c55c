package org.ucx4j.examples;

import java.time.Duration;
import java.util.Arrays;
import java.util.concurrent.ThreadLocalRandom;
import org.ucx4j.ConnectionResetException;
import org.ucx4j.Endpoint;
import org.ucx4j.EndpointClosedException;
import org.ucx4j.Listener;
import org.ucx4j.Ucx;
import org.ucx4j.UcxException;

/**
 * An echo server and its client: the server answers every object a client sends with the same bytes, one virtual
 * thread per connection, in plain blocking calls.
 *
 * <pre>
 * ./scripts/example Echo server 13337
 * ./scripts/example Echo client 127.0.0.1 13337 1000
 * </pre>
 */
public final class Echo {
    private Echo() {}

    public static void main(String[] args) throws Exception {
        if (args.length >= 2 && args[0].equals("server")) {
            try (Ucx ucx = Ucx.open(); Listener l = serve(ucx, Integer.parseInt(args[1]))) {
                System.out.println("echo server listening on port " + l.port() + " (Ctrl-C to stop)");
                Thread.currentThread().join();
            }
        } else if (args.length >= 3 && args[0].equals("client")) {
            int count = args.length > 3 ? Integer.parseInt(args[3]) : 100;
            try (Ucx ucx = Ucx.open()) {
                long t0 = System.nanoTime();
                long bytes = run(ucx, args[1], Integer.parseInt(args[2]), count);
                double ms = (System.nanoTime() - t0) / 1e6;
                System.out.printf("%d messages (%d bytes) echoed and verified in %.1f ms%n", count, bytes, ms);
            }
        } else {
            System.err.println("usage: Echo server PORT | Echo client HOST PORT [COUNT]");
            System.exit(2);
        }
    }

    /** Listens on {@code port} (0: any free one) and echoes every object of every connection until it closes. */
    public static Listener serve(Ucx ucx, int port) {
        return ucx.listen(port, ep -> { // runs on its own virtual thread per connection
            try (ep) {
                while (true) {
                    ep.sendObject(ep.recvObject());
                }
            } catch (ConnectionResetException | EndpointClosedException gone) {
                // the client went away: this connection is done
            }
        });
    }

    /**
     * Sends {@code count} objects of random sizes (0 B to 1 MiB: eager and rendezvous) and checks that each comes
     * back unchanged; returns the bytes echoed.
     */
    public static long run(Ucx ucx, String host, int port, int count) {
        long bytes = 0;
        try (Endpoint ep = ucx.connect(host, port)) {
            ThreadLocalRandom random = ThreadLocalRandom.current();
            for (int i = 0; i < count; i++) {
                byte[] out = new byte[i % 10 == 9 ? random.nextInt(1 << 20) : random.nextInt(256)];
                random.nextBytes(out);
                ep.sendObject(out);
                byte[] back = ep.recvObject(Duration.ofSeconds(10));
                if (!Arrays.equals(out, back)) {
                    throw new IllegalStateException("message " + i + " came back changed (" + out.length + " B sent, "
                            + back.length + " B received)");
                }
                bytes += out.length;
            }
        } catch (UcxException e) {
            throw new IllegalStateException("echo failed: " + e.getMessage(), e);
        }
        return bytes;
    }
}
