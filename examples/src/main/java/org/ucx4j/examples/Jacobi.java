package org.ucx4j.examples;

import static java.lang.foreign.ValueLayout.JAVA_DOUBLE;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.ucx4j.Endpoint;
import org.ucx4j.Listener;
import org.ucx4j.ProgressMode;
import org.ucx4j.Ucx;
import org.ucx4j.UcxOptions;

/**
 * A Jacobi solver of the 2D heat equation with a halo exchange, the HPC pattern of the Charm4py/AMPI GPU-messaging
 * paper in its simplest form: the grid's rows are split among ranks; every iteration each rank sends its first and
 * last rows to its neighbours and receives their edge rows into its ghost rows (tagged messages, posted
 * asynchronously, straight from and into the grid: no copies), then updates its cells from the four neighbours'
 * old values. The top edge is held at 100, the other edges at 0.
 * <p>
 * Ranks are threads with a {@link Ucx} each here ({@link #run}) or processes ({@code --rank}):
 * <pre>
 * ./scripts/example Jacobi --ranks 4 --rows 1024 --cols 1024 --iterations 500 --verify
 * for r in 0 1 2; do ./scripts/example Jacobi --rank $r --ranks 3 --port 13400 &amp; done; wait
 * </pre>
 */
public final class Jacobi {
    /** Tags: a row for the receiver's top ghost row (sent downwards), for its bottom ghost row (sent upwards). */
    static final int TO_TOP_GHOST = 1, TO_BOTTOM_GHOST = 2, SUM = 3;
    static final double HOT = 100.0;
    private static final Duration T = Duration.ofSeconds(30);

    private Jacobi() {}

    /** One rank's share: global rows {@code [first, first + count)} plus a ghost row above and below. */
    static final class Block implements AutoCloseable {
        final int first, count, rows, cols;
        private final Arena arena = Arena.ofShared();
        MemorySegment cur, next; // (count + 2) x cols doubles, row 0 and row count + 1 are the ghosts

        Block(int rank, int ranks, int rows, int cols) {
            this.rows = rows;
            this.cols = cols;
            this.first = (int) ((long) rows * rank / ranks);
            this.count = (int) ((long) rows * (rank + 1) / ranks) - first;
            cur = arena.allocate((long) (count + 2) * cols * Double.BYTES, 64);
            next = arena.allocate(cur.byteSize(), 64);
            if (first == 0) { // the hot edge, fixed in both buffers
                for (int j = 0; j < cols; j++) {
                    cur.setAtIndex(JAVA_DOUBLE, cols + j, HOT);
                    next.setAtIndex(JAVA_DOUBLE, cols + j, HOT);
                }
            }
        }

        MemorySegment row(MemorySegment grid, int local) {
            return grid.asSlice((long) local * cols * Double.BYTES, (long) cols * Double.BYTES);
        }

        /** Updates the interior cells from {@code cur} into {@code next}; edges stay as they are. */
        void update() {
            for (int i = 1; i <= count; i++) {
                int g = first + i - 1;
                if (g == 0 || g == rows - 1) {
                    continue;
                }
                long up = (long) (i - 1) * cols, at = (long) i * cols, down = (long) (i + 1) * cols;
                for (int j = 1; j < cols - 1; j++) {
                    double v = 0.25 * (cur.getAtIndex(JAVA_DOUBLE, up + j) + cur.getAtIndex(JAVA_DOUBLE, down + j)
                            + cur.getAtIndex(JAVA_DOUBLE, at + j - 1) + cur.getAtIndex(JAVA_DOUBLE, at + j + 1));
                    next.setAtIndex(JAVA_DOUBLE, at + j, v);
                }
            }
            MemorySegment t = cur;
            cur = next;
            next = t;
        }

        double sum() {
            double s = 0;
            for (long k = cols, end = (long) (count + 1) * cols; k < end; k++) {
                s += cur.getAtIndex(JAVA_DOUBLE, k);
            }
            return s;
        }

        /** This rank's rows, row-major. */
        double[] owned() {
            return cur.asSlice((long) cols * Double.BYTES, (long) count * cols * Double.BYTES).toArray(JAVA_DOUBLE);
        }

        @Override
        public void close() {
            arena.close();
        }
    }

    /** Runs {@code iterations} steps on one rank, exchanging halos with {@code up} and {@code down} (null at the edges). */
    static void solve(Block b, Endpoint up, Endpoint down, int iterations) throws Exception {
        List<CompletableFuture<Long>> pending = new ArrayList<>(4);
        for (int it = 0; it < iterations; it++) {
            pending.clear();
            if (up != null) { // receives first, so a neighbour's row finds its receive already posted
                pending.add(up.recvAsync(b.row(b.cur, 0), TO_TOP_GHOST));
            }
            if (down != null) {
                pending.add(down.recvAsync(b.row(b.cur, b.count + 1), TO_BOTTOM_GHOST));
            }
            if (up != null) {
                pending.add(up.sendAsync(b.row(b.cur, 1), TO_BOTTOM_GHOST));
            }
            if (down != null) {
                pending.add(down.sendAsync(b.row(b.cur, b.count), TO_TOP_GHOST));
            }
            for (CompletableFuture<Long> f : pending) {
                f.get(T.toSeconds(), TimeUnit.SECONDS); // the sends must be done too: next we overwrite their rows
            }
            b.update();
        }
    }

    /** The result of {@link #run}: the whole grid after the last iteration, and the time it took. */
    public record Result(double[] grid, long nanos) {}

    /**
     * Solves on {@code ranks} threads, each with its own {@link Ucx} (its own worker and progress thread) connected
     * to its neighbours through listeners, and gathers the grid.
     */
    public static Result run(int ranks, int rows, int cols, int iterations, ProgressMode mode) throws Exception {
        if (ranks < 1 || rows < ranks || cols < 3) {
            throw new IllegalArgumentException("need 1 <= ranks <= rows and cols >= 3");
        }
        List<Ucx> ucxs = new ArrayList<>();
        List<Listener> listeners = new ArrayList<>();
        List<CompletableFuture<Endpoint>> accepted = new ArrayList<>();
        List<Endpoint> ups = new ArrayList<>();
        try {
            for (int r = 0; r < ranks; r++) {
                Ucx ucx = Ucx.open(UcxOptions.defaults().withProgressMode(mode).withName("jacobi-" + r));
                ucxs.add(ucx);
                CompletableFuture<Endpoint> down = new CompletableFuture<>();
                accepted.add(down);
                listeners.add(ucx.listen("127.0.0.1", 0, down::complete)); // rank r + 1 connects here
            }
            ups.add(null);
            for (int r = 1; r < ranks; r++) {
                ups.add(ucxs.get(r).connect("127.0.0.1", listeners.get(r - 1).port()));
            }
            List<Block> blocks = new ArrayList<>();
            List<CompletableFuture<Void>> done = new ArrayList<>();
            long t0 = System.nanoTime();
            for (int r = 0; r < ranks; r++) {
                Block b = new Block(r, ranks, rows, cols);
                blocks.add(b);
                Endpoint up = ups.get(r);
                Endpoint down = r + 1 < ranks ? accepted.get(r).get(T.toSeconds(), TimeUnit.SECONDS) : null;
                CompletableFuture<Void> f = new CompletableFuture<>();
                done.add(f);
                Thread.ofPlatform().name("jacobi-rank-" + r).start(() -> {
                    try {
                        solve(b, up, down, iterations);
                        f.complete(null);
                    } catch (Throwable t) {
                        f.completeExceptionally(t);
                    }
                });
            }
            CompletableFuture.allOf(done.toArray(CompletableFuture[]::new)).get(10, TimeUnit.MINUTES);
            long nanos = System.nanoTime() - t0;
            double[] grid = new double[rows * cols];
            for (Block b : blocks) {
                System.arraycopy(b.owned(), 0, grid, b.first * cols, b.count * cols);
                b.close();
            }
            return new Result(grid, nanos);
        } finally {
            for (Listener l : listeners) {
                l.close();
            }
            for (Ucx ucx : ucxs) {
                ucx.close();
            }
        }
    }

    /** The same computation on one thread, no messages: what every decomposition must reproduce exactly. */
    public static double[] serial(int rows, int cols, int iterations) {
        double[] cur = new double[rows * cols], next = new double[rows * cols];
        for (int j = 0; j < cols; j++) {
            cur[j] = next[j] = HOT;
        }
        for (int it = 0; it < iterations; it++) {
            for (int i = 1; i < rows - 1; i++) {
                for (int j = 1; j < cols - 1; j++) {
                    int at = i * cols + j;
                    next[at] = 0.25 * (cur[at - cols] + cur[at + cols] + cur[at - 1] + cur[at + 1]);
                }
            }
            double[] t = cur;
            cur = next;
            next = t;
        }
        return cur;
    }

    public static void main(String[] args) throws Exception {
        int ranks = 4, rows = 512, cols = 512, iterations = 200, rank = -1, port = 13400;
        String host = "127.0.0.1";
        ProgressMode mode = ProgressMode.BACKOFF;
        boolean verify = false;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--ranks" -> ranks = Integer.parseInt(args[++i]);
                case "--rows" -> rows = Integer.parseInt(args[++i]);
                case "--cols" -> cols = Integer.parseInt(args[++i]);
                case "--iterations" -> iterations = Integer.parseInt(args[++i]);
                case "--rank" -> rank = Integer.parseInt(args[++i]);
                case "--port" -> port = Integer.parseInt(args[++i]);
                case "--host" -> host = args[++i];
                case "--verify" -> verify = true;
                case "--progress" -> mode = ProgressMode.valueOf(args[++i].toUpperCase(java.util.Locale.ROOT));
                default -> {
                    System.err.println("usage: Jacobi [--ranks N] [--rows R] [--cols C] [--iterations I] [--verify]"
                            + " [--progress backoff|blocking|polling] [--rank K --port P [--host H]]");
                    System.exit(2);
                }
            }
        }
        if (rank >= 0) {
            runRank(rank, ranks, rows, cols, iterations, host, port);
            return;
        }
        Result r = run(ranks, rows, cols, iterations, mode);
        double sum = 0;
        for (double v : r.grid()) {
            sum += v;
        }
        System.out.printf("%d ranks, %d x %d grid, %d iterations: %.1f ms, sum of cells %.6f%n", ranks, rows, cols,
                iterations, r.nanos() / 1e6, sum);
        if (verify) {
            boolean same = java.util.Arrays.equals(r.grid(), serial(rows, cols, iterations));
            System.out.println(same ? "identical to the serial solution" : "DIFFERS from the serial solution");
            if (!same) {
                System.exit(1);
            }
        }
    }

    /**
     * One rank as its own process: listens on {@code port + rank}, connects to rank - 1 (retrying while it starts),
     * solves, then the partial sums travel up the chain and rank 0 prints the total.
     */
    static void runRank(int rank, int ranks, int rows, int cols, int iterations, String host, int port)
            throws Exception {
        try (Ucx ucx = Ucx.open(); Block b = new Block(rank, ranks, rows, cols)) {
            CompletableFuture<Endpoint> accepted = new CompletableFuture<>();
            try (Listener l = ucx.listen(port + rank, accepted::complete)) {
                Endpoint up = null;
                for (long deadline = System.nanoTime() + T.toNanos(); rank > 0 && up == null; ) {
                    try {
                        up = ucx.connect(host, port + rank - 1);
                    } catch (org.ucx4j.UcxException notYet) {
                        if (System.nanoTime() > deadline) {
                            throw notYet;
                        }
                        Thread.sleep(100);
                    }
                }
                Endpoint down = rank + 1 < ranks ? accepted.get(T.toSeconds(), TimeUnit.SECONDS) : null;
                long t0 = System.nanoTime();
                solve(b, up, down, iterations);
                double sum = b.sum();
                if (down != null) {
                    byte[] partial = new byte[8];
                    down.recv(partial, SUM, T);
                    sum += java.nio.ByteBuffer.wrap(partial).getDouble();
                }
                if (up != null) {
                    up.send(java.nio.ByteBuffer.allocate(8).putDouble(sum).array(), SUM, T);
                    up.close();
                } else {
                    System.out.printf("%d ranks (processes), %d x %d grid, %d iterations: %.1f ms, sum of cells %.6f%n",
                            ranks, rows, cols, iterations, (System.nanoTime() - t0) / 1e6, sum);
                }
                if (down != null) {
                    down.close();
                }
            }
        }
    }
}
