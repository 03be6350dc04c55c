package org.ucx4j.cli;

import java.io.EOFException;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.StandardSocketOptions;
import java.nio.ByteBuffer;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;

/**
 * The baseline a Java user would otherwise write: blocking NIO {@link SocketChannel}s with TCP_NODELAY and direct
 * buffers, one write per message, same commands as {@link UcxRuns}.
 */
final class NioRuns {
    private NioRuns() {}

    static ServerSocketChannel bind() throws IOException {
        return ServerSocketChannel.open().bind(new InetSocketAddress("127.0.0.1", 0));
    }

    static void serve(ServerSocketChannel server) {
        try (SocketChannel ch = server.accept()) {
            ch.setOption(StandardSocketOptions.TCP_NODELAY, true);
            ByteBuffer cmd = ByteBuffer.allocateDirect(32);
            ByteBuffer buf = ByteBuffer.allocateDirect(64 << 20);
            ByteBuffer out = ByteBuffer.allocateDirect(64 << 20); // a ping-pong answers from its own buffer
            ByteBuffer ack = ByteBuffer.allocateDirect(1);
            while (true) {
                cmd.clear();
                readFully(ch, cmd);
                cmd.flip();
                long mode = cmd.getLong(), size = cmd.getLong(), total = cmd.getLong();
                if (mode == UcxRuns.QUIT) {
                    return;
                }
                if (mode == UcxRuns.PING_PONG) {
                    for (long i = 0; i < total; i++) {
                        buf.clear().limit((int) size);
                        readFully(ch, buf);
                        out.clear().limit((int) size);
                        writeFully(ch, out);
                    }
                } else {
                    long left = size * total;
                    while (left > 0) {
                        buf.clear().limit((int) Math.min(buf.capacity(), left));
                        int n = ch.read(buf);
                        if (n < 0) {
                            throw new EOFException();
                        }
                        left -= n;
                    }
                    ack.clear();
                    writeFully(ch, ack);
                }
            }
        } catch (IOException e) {
            // client gone
        }
    }

    static SocketChannel connect(int port) throws IOException {
        SocketChannel ch = SocketChannel.open(new InetSocketAddress("127.0.0.1", port));
        ch.setOption(StandardSocketOptions.TCP_NODELAY, true);
        return ch;
    }

    static void quit(SocketChannel ch) throws IOException {
        command(ch, UcxRuns.QUIT, 0, 0);
    }

    static Measurement latency(SocketChannel ch, long size, long iters, long warmup) throws IOException {
        ByteBuffer b = ByteBuffer.allocateDirect((int) size);
        ByteBuffer out = ByteBuffer.allocateDirect((int) size); // sent from, as ucx_perftest's send buffer
        command(ch, UcxRuns.PING_PONG, size, iters + warmup);
        for (long i = 0; i < warmup; i++) {
            pingPong(ch, out, b);
        }
        RoundTrips times = new RoundTrips(iters, 2);
        long t0 = System.nanoTime(); // one clock read per iteration, as in UcxRuns
        for (long i = 0; i < iters; i++) {
            pingPong(ch, out, b);
            long t1 = System.nanoTime();
            if (times.add(t1 - t0)) {
                times.fold();
                t1 = System.nanoTime();
            }
            t0 = t1;
        }
        return times.measurement("nio", size);
    }

    static Measurement stream(SocketChannel ch, String mode, long size, long iters) throws IOException {
        ByteBuffer b = ByteBuffer.allocateDirect((int) size);
        ByteBuffer ack = ByteBuffer.allocateDirect(1);
        command(ch, UcxRuns.STREAM, size, iters);
        long start = System.nanoTime();
        for (long i = 0; i < iters; i++) {
            b.clear();
            writeFully(ch, b);
        }
        readFully(ch, ack);
        long elapsed = System.nanoTime() - start;
        return new Measurement("nio", mode, size, iters, Double.NaN, Double.NaN, elapsed / 1e3 / iters,
                size * (double) iters / elapsed * 1e3, iters / (elapsed / 1e9));
    }

    private static void pingPong(SocketChannel ch, ByteBuffer out, ByteBuffer in) throws IOException {
        out.clear();
        writeFully(ch, out);
        in.clear();
        readFully(ch, in);
    }

    private static void command(SocketChannel ch, long mode, long size, long total) throws IOException {
        ByteBuffer cmd = ByteBuffer.allocate(32);
        cmd.putLong(mode).putLong(size).putLong(total).putLong(0).flip();
        writeFully(ch, cmd);
    }

    private static void readFully(SocketChannel ch, ByteBuffer b) throws IOException {
        while (b.hasRemaining()) {
            if (ch.read(b) < 0) {
                throw new EOFException("peer closed");
            }
        }
    }

    private static void writeFully(SocketChannel ch, ByteBuffer b) throws IOException {
        while (b.hasRemaining()) {
            ch.write(b);
        }
    }
}
