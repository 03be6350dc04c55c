package org.ucx4j.cli;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.ucx4j.Endpoint;
import org.ucx4j.Listener;
import org.ucx4j.ProgressMode;
import org.ucx4j.Ucx;
import org.ucx4j.UcxOptions;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * The headline benchmark: for each size and mode, ucx4j, ucx_perftest and a Java NIO socket baseline, one after
 * another in one invocation; {@code --repeat} rotates their order and reports medians.
 */
@Command(name = "sweep", description = "ucx4j vs ucx_perftest vs Java NIO over sizes: latency, bandwidth, "
        + "message rate; table, JSON and plot.")
final class SweepBench implements Callable<Integer> {
    @Option(names = "--sizes", defaultValue = "8,64,1k,4k,16k,64k,256k,1m,4m",
            description = "message sizes (k = KiB, m = MiB), default ${DEFAULT-VALUE}")
    String sizes;

    @Option(names = "--modes", defaultValue = "latency,bandwidth,rate", split = ",",
            description = "latency, bandwidth, rate (rate runs for sizes <= 1 KiB)")
    List<String> modes;

    @Option(names = "--stacks", defaultValue = "ucx4j,perftest,nio", split = ",",
            description = "ucx4j, perftest, nio")
    List<String> stacks;

    @Option(names = "--api", defaultValue = "tag",
            description = "ucx4j API measured: tag, am (active messages), am-handler (active messages taken by a "
                    + "handler on the server's worker thread, as ucp_am_* take theirs), stream, rma (get); "
                    + "ucx_perftest runs the matching test (tag_*, ucp_am_*, stream_*, ucp_get)")
    String api;

    @Option(names = "--repeat", defaultValue = "6", description = "rounds; stacks rotate order (and reverse it "
            + "every other cycle: 6 rounds of 3 stacks are balanced), medians reported")
    int repeat;

    @Option(names = "--scale", defaultValue = "1", description = "multiplies every iteration count")
    double scale;

    @Option(names = "--window", defaultValue = "32", description = "outstanding sends in bandwidth/rate mode")
    int window;

    @Option(names = "--transport", defaultValue = "auto",
            description = "UCX transports for both UCX stacks: auto (UCX's choice: shared memory here), shm "
                    + "(shm,tcp: ucx_perftest -e needs a TCP lane beside it), or tcp (what peers on other hosts "
                    + "without RDMA use)")
    String transport;

    @Option(names = "--error-handling", defaultValue = "peer",
            description = "peer: UCX peer error handling on both stacks (ucx4j's default endpoints, ucx_perftest -e); "
                    + "none: off on both (UCX 1.13 then uses CMA zero-copy on one host)")
    String errorHandling;

    @Option(names = "--progress", defaultValue = "caller", description = "ucx4j's progress mode on both sides: "
            + "caller (the measuring thread drives the worker, as ucx_perftest does), or a progress thread: backoff "
            + "(ucx4j's default), blocking or polling (a waiting thread borrows the worker from it)")
    String progress;

    @Option(names = "--pull-budget", description = "the receiving ucx4j worker's rendezvous pull budget in bytes "
            + "(UcxOptions.withPullBudget; e.g. 1m, 1024m; default: ucx4j's, 512 KiB)")
    String pullBudget;

    @Option(names = "--json", description = "write results to this file")
    Path json;

    @Option(names = "--plot", description = "draw latency and bandwidth vs size: FILE.png (side by side), or FILE.svg (with both "
            + "modes: FILE-latency.svg and FILE-bandwidth.svg)")
    Path plot;

    private static final long MAX_SIZE = 64L << 20;

    @Override
    public Integer call() throws Exception {
        long[] sz = checkArguments();
        if (SendRecvBench.progressMode(progress) == ProgressMode.POLLING
                && (stacks.contains("perftest") || stacks.contains("nio"))) {
            throw new UsageException("--progress polling keeps a thread spinning in each ucx4j process, which would "
                    + "take the two cores ucx_perftest and NIO measure on: use it with --stacks ucx4j");
        }
        UcxRuns.Api apiKind = UcxRuns.Api.parse(api);
        boolean peerErrors = peerErrors(errorHandling);
        String tls = SendRecvBench.tls(transport);
        PerftestRuns perftest = new PerftestRuns(peerErrors, tls);
        List<String> failures = new ArrayList<>();
        List<String> active = new ArrayList<>(stacks);
        if (active.contains("perftest") && !perftest.available()) {
            // the comparison asked for cannot be made: the other stacks still run, and the exit status says so
            String what = "ucx_perftest not found (apt-get install ucx-utils, or UCX4J_UCX_HOME's bin/); its runs "
                    + "are left out";
            if (active.size() == 1) {
                throw new UsageException(what + ", and no other stack was asked for");
            }
            System.err.println("ucx4j: " + what);
            failures.add(what);
            active.remove("perftest");
        }
        if (active.contains("perftest")) {
            perftestVersion = perftest.describe(Ucx.version());
            if (perftestVersion.contains("differs")) {
                System.err.println("ucx4j: warning: " + perftestVersion);
            }
        }
        List<Object[]> plan = new ArrayList<>();
        for (int r = 0; r < repeat; r++) {
            for (long s : sz) {
                for (String m : modes) {
                    if (m.equals(Measurement.RATE) && s > 1024) {
                        continue;
                    }
                    for (String stack : roundOrder(active, r)) {
                        plan.add(new Object[] {stack, m, s});
                    }
                }
            }
        }
        Map<String, List<Measurement>> results = new LinkedHashMap<>();
        String peerStats = null;
        Process server = startServer();
        try {
            String line = Children.awaitLine(server, "PORTS ", Duration.ofSeconds(60));
            if (line == null) {
                System.err.println("ucx4j: the benchmark server did not start");
                return 1;
            }
            String[] p = line.split(" ");
            UcxOptions client = UcxOptions.defaults().withProgressMode(SendRecvBench.progressMode(progress))
                    .withPeerErrorHandling(peerErrors).withName("sweep-client")
                    .withHostMemoryOnly(true); // host buffers, as ucx_perftest is told (-m host)
            try (Ucx ucx = Ucx.open(tls == null ? client : client.with("TLS", tls));
                    Endpoint ep = ucx.connect("127.0.0.1", Integer.parseInt(p[1]), Duration.ofSeconds(30));
                    SocketChannel nio = NioRuns.connect(Integer.parseInt(p[2]))) {
                JavaStacks stacks = new JavaStacks(server, ep, nio, failures, peerErrors);
                prepostFrom = UcxRuns.prepostFrom(ep); // the server's endpoint has the same configuration
                for (String stack : active) {
                    if (!stack.equals("perftest")) {
                        settleJit(stacks, apiKind, ucx, stack, sz);
                    }
                }
                long t0 = System.nanoTime();
                for (int i = 0; i < plan.size(); i++) {
                    String stack = (String) plan.get(i)[0];
                    String mode = (String) plan.get(i)[1];
                    long size = (long) plan.get(i)[2];
                    Measurement m = null;
                    if (stack.equals("perftest")) {
                        progress(plan, i, t0, stack, mode, size);
                        try {
                            m = measure(apiKind, ucx, ep, nio, perftest, stack, mode, size);
                        } catch (Exception e) { // a ucx_perftest run fails alone: each is a pair of processes
                            String what = stack + " " + mode + " " + Measurement.human(size) + ": " + e;
                            System.err.println("\nucx4j: " + what);
                            failures.add(what);
                        }
                    } else if (stacks.usable(stack)) {
                        progress(plan, i, t0, stack, mode, size);
                        long n = iterations(stack, mode, size);
                        m = stacks.run(stack, stack + " " + mode + " " + Measurement.human(size),
                                limitSeconds(120, size, n + warmupIterations(mode, n)),
                                () -> measure(apiKind, ucx, ep, nio, perftest, stack, mode, size));
                    }
                    results.computeIfAbsent(stack + "|" + mode + "|" + size, k -> new ArrayList<>())
                            .add(m != null ? m : Measurement.failed(stack, mode, size));
                }
                System.err.print("\r" + " ".repeat(78) + "\r");
                peerStats = stacks.finish();
            }
        } finally {
            server.waitFor(5, TimeUnit.SECONDS);
            server.destroyForcibly();
        }
        Report report = new Report(results, sz, modes, active, apiKind);
        report.printTable(System.out, describe());
        if (peerStats != null && active.contains("ucx4j")) {
            System.out.println();
            System.out.println("per-peer bandwidth of ucx4j transfers >= 1 MB (Endpoint.stats(): 25% 50% 75% (total "
                    + "bytes); each figure: 8 consecutive sends' bytes over their service times, each from its "
                    + "post, or the previous one's completion if later, to its own)");
            System.out.println(peerStats);
        }
        if (json != null) {
            ObjectMapper om = new ObjectMapper().enable(SerializationFeature.INDENT_OUTPUT);
            Map<String, Object> tree = report.json(describe());
            tree.put("failures", failures);
            om.writeValue(json.toFile(), tree);
            System.out.println("wrote " + json);
        }
        if (plot != null) {
            for (Path f : Plot.draw(report, plot)) {
                System.out.println("wrote " + f);
            }
        }
        if (!failures.isEmpty()) {
            System.err.println("ucx4j: " + failures.size() + " failure(s) (a failed run shows as '-'): "
                    + String.join("; ", failures));
            return 1;
        }
        return 0;
    }

    /**
     * Every argument checked before anything starts (a bad one is a usage error, not a failure after a run); the
     * sizes.
     */
    long[] checkArguments() {
        if (window <= 0 || window > MAX_WINDOW || repeat <= 0 || repeat > MAX_REPEAT || !(scale > 0)
                || scale > MAX_SCALE) {
            throw new UsageException("--window must be 1 to " + MAX_WINDOW + ", --repeat 1 to " + MAX_REPEAT
                    + ", --scale above 0 and at most " + (int) MAX_SCALE + "; got " + window + ", " + repeat + ", "
                    + scale);
        }
        for (String s : stacks) {
            if (!List.of("ucx4j", "perftest", "nio").contains(s)) {
                throw new UsageException("unknown stack " + s + " (ucx4j, perftest, nio)");
            }
        }
        distinct("--stacks", stacks);
        distinct("--modes", modes);
        for (String m : modes) {
            if (!List.of(Measurement.LATENCY, Measurement.BANDWIDTH, Measurement.RATE).contains(m)) {
                throw new UsageException("unknown mode " + m + " (latency, bandwidth, rate)");
            }
        }
        long[] sz = Measurement.parseSizes(sizes);
        distinct("--sizes", java.util.Arrays.stream(sz).boxed().toList());
        for (long s : sz) {
            if (s > MAX_SIZE) {
                throw new UsageException("sizes up to 64 MiB, got " + s);
            }
        }
        for (long s : sz) {
            UcxRuns.Api.parse(api).checkSize(s);
        }
        peerErrors(errorHandling);
        SendRecvBench.tls(transport);
        SendRecvBench.progressMode(progress);
        if (pullBudget != null && Measurement.parseSize(pullBudget) <= 0) {
            throw new UsageException("--pull-budget must be positive, got " + pullBudget);
        }
        if (plot != null) {
            Plot.extension(plot);
            writableDirectory("--plot", plot);
        }
        if (json != null) {
            writableDirectory("--json", json);
        }
        boolean any = false;
        for (String m : modes) {
            for (long s : sz) {
                any |= !(m.equals(Measurement.RATE) && s > 1024);
            }
        }
        if (!any) {
            throw new UsageException("nothing to run: rate mode runs only sizes up to 1 KiB");
        }
        return sz;
    }

    private static final int MAX_WINDOW = 1 << 16;
    private static final int MAX_REPEAT = 1000;
    private static final double MAX_SCALE = 1000;

    private static void distinct(String option, List<?> values) {
        if (new java.util.HashSet<>(values).size() != values.size()) {
            throw new UsageException(option + " names a value twice: " + values);
        }
    }

    /** The file's directory exists and can be written, so the results are not lost after the run. */
    private static void writableDirectory(String option, Path file) {
        Path dir = file.toAbsolutePath().getParent();
        if (dir == null || !java.nio.file.Files.isDirectory(dir) || !java.nio.file.Files.isWritable(dir)) {
            throw new UsageException(option + ": no writable directory " + dir + " for " + file);
        }
    }

    /** Which ucx_perftest runs, and its UCX's version (null: not run). */
    private String perftestVersion;

    /**
     * The Java stacks' connections (the ucx4j endpoint and the NIO socket, both to the one server process) and which
     * stacks can still run. Each run has a deadline far above its expected time; past it the server process is
     * killed and this side's endpoint aborted and socket closed, so a wedged peer ends the run instead of hanging
     * the sweep, and both Java stacks' later runs are left out. A stack that fails otherwise leaves its connection
     * in an unknown state: its later runs are left out, and its connection is ended here so the server's side of
     * it stops too (the other Java stack and ucx_perftest go on, beside no busy leftover).
     */
    private static final class JavaStacks {
        private final Process server;
        private final Endpoint ep;
        private final SocketChannel nio;
        private final List<String> failures;
        private final boolean peerErrors;
        private final java.util.Set<String> out = new java.util.HashSet<>();
        private volatile boolean serverKilled;

        JavaStacks(Process server, Endpoint ep, SocketChannel nio, List<String> failures, boolean peerErrors) {
            this.server = server;
            this.ep = ep;
            this.nio = nio;
            this.failures = failures;
            this.peerErrors = peerErrors;
        }

        boolean usable(String stack) {
            return !out.contains(stack);
        }

        /** {@code body} within {@code limitSeconds}; null when it failed (recorded, and the stack left out). */
        <T> T run(String stack, String what, long limitSeconds, Callable<T> body) {
            CompletableFuture<Void> watchdog = CompletableFuture.runAsync(() -> {
                serverKilled = true;
                System.err.printf(Locale.ROOT, "%nucx4j: the %s run took over %d s; ending it%n", what,
                        limitSeconds);
                server.destroyForcibly();
                ep.abort();
                closeNio();
            }, CompletableFuture.delayedExecutor(limitSeconds, TimeUnit.SECONDS));
            try {
                return body.call();
            } catch (Exception e) {
                fail(stack, what + ": " + e);
                return null;
            } finally {
                watchdog.cancel(false); // one that started meanwhile still runs: serverKilled tells
                if (serverKilled) {
                    out.add("ucx4j");
                    out.add("nio");
                }
            }
        }

        private void fail(String stack, String what) {
            out.add(stack);
            String text;
            if (stack.equals("ucx4j") && !peerErrors && !serverKilled) {
                // without peer error handling an aborted endpoint's peer hears nothing, and the server would wait
                // (or spin, in caller mode) beside the later runs: it goes, and NIO with it
                serverKilled = true;
                server.destroyForcibly();
                closeNio();
            }
            if (serverKilled || !server.isAlive()) {
                out.add("ucx4j");
                out.add("nio");
                text = what + "; the Java stacks' later runs are left out (the benchmark server is gone)";
            } else {
                if (stack.equals("ucx4j")) {
                    ep.abort();
                } else {
                    closeNio();
                }
                text = what + "; " + stack + "'s later runs are left out";
            }
            System.err.println("\nucx4j: " + text);
            failures.add(text);
        }

        private void closeNio() {
            try {
                nio.close();
            } catch (java.io.IOException ignored) {
                // closing is all that is wanted
            }
        }

        /** Tells the server that the stacks still in are done; the ucx4j endpoint's per-peer figures, or null. */
        String finish() {
            String stats = null;
            if (usable("ucx4j")) {
                stats = run("ucx4j", "ucx4j quit", 60, () -> {
                    String figures = "(sweep-client,sweep-server) | " + ep.stats().summary();
                    UcxRuns.quit(ep);
                    return figures;
                });
            }
            if (usable("nio")) {
                run("nio", "nio quit", 60, () -> {
                    NioRuns.quit(nio);
                    return null;
                });
            }
            return stats;
        }
    }

    /**
     * The stacks' order in round {@code r}: rotated each round, so each stack runs first, second and last equally
     * often, and reversed every other {@code n} rounds, so that over {@code 2n} rounds each stack also follows each
     * other one equally often (a Williams design: whatever one run leaves behind, such as a process still winding
     * down, falls on every stack alike).
     */
    static List<String> roundOrder(List<String> stacks, int r) {
        int n = stacks.size();
        List<String> base = new ArrayList<>(stacks);
        if ((r / n) % 2 == 1) {
            java.util.Collections.reverse(base);
        }
        List<String> order = new ArrayList<>(n);
        for (int k = 0; k < n; k++) {
            order.add(base.get((k + r) % n));
        }
        return order;
    }

    /** {@code --error-handling}: peer (UCX peer error handling, the default) or none. */
    static boolean peerErrors(String mode) {
        return switch (mode) {
            case "peer" -> true;
            case "none" -> false;
            default -> throw new UsageException("--error-handling must be peer or none, got " + mode);
        };
    }

    /** From which size the ucx4j server posts its tag receives ahead ({@link UcxRuns#prepostFrom}); 0: unknown. */
    private long prepostFrom;

    private String describe() {
        return String.format(Locale.ROOT, "ucx4j %s api, %s progress, window %d%s; ucx_perftest %s %s; NIO "
                + "blocking SocketChannel, TCP_NODELAY, direct buffers; repeat %d (medians; ratios: median of the "
                + "per-round ratios)", api, SendRecvBench.progressMode(progress).name().toLowerCase(Locale.ROOT),
                window,
                UcxRuns.Api.parse(api) == UcxRuns.Api.TAG && prepostFrom > 0
                        ? " (streaming, the receiver takes messages below " + prepostFrom + " B, where UCX's "
                                + "rendezvous for ucx4j's sends starts, with blocking receives, larger ones through a "
                                + "window of async receives)"
                        : "",
                PerftestRuns.test(UcxRuns.Api.parse(api), Measurement.LATENCY) + "/"
                        + PerftestRuns.test(UcxRuns.Api.parse(api), Measurement.BANDWIDTH),
                peerErrors(errorHandling) ? "-e" : "without -e", repeat)
                + (UcxRuns.Api.parse(api) == UcxRuns.Api.RMA
                        ? "; memory allocated by UCX, posix first (UCX_ALLOC_PRIO)" : "")
                + (peerErrors(errorHandling) ? "" : "; no peer error handling on either stack")
                + (SendRecvBench.tls(transport) == null ? "" : "; UCX_TLS=" + SendRecvBench.tls(transport)
                        + " on both UCX stacks")
                + (pullBudget == null ? "" : "; ucx4j pull budget " + pullBudget)
                + (perftestVersion == null ? "" : "\nucx_perftest: " + perftestVersion)
                + "\nboth UCX stacks: " + String.join(" ", Ucx.environmentDefaults().entrySet().stream()
                        .map(e -> e.getKey() + "=" + e.getValue()).toList());
    }

    private Measurement measure(UcxRuns.Api apiKind, Ucx ucx, Endpoint ep, SocketChannel nio, PerftestRuns perftest,
            String stack, String mode, long size) throws Exception {
        long iters = iterations(stack, mode, size);
        // the same warm-up for every stack; enough iterations for the JIT to finish with the Java ones
        long warmup = warmupIterations(mode, iters);
        if (stack.equals("perftest")) {
            return perftest.run(apiKind, mode, size, iters, warmup, window);
        }
        warmUp(stack + mode + size, () -> pass(apiKind, ucx, ep, nio, stack, mode, size, warmup));
        return pass(apiKind, ucx, ep, nio, stack, mode, size, iters);
    }

    /** One run of a Java stack ({@code ucx4j} or {@code nio}) at one mode and size. */
    private Measurement pass(UcxRuns.Api apiKind, Ucx ucx, Endpoint ep, SocketChannel nio, String stack,
            String mode, long size, long iters) throws Exception {
        boolean latency = Measurement.LATENCY.equals(mode);
        if (stack.equals("ucx4j")) {
            return latency ? UcxRuns.latency(apiKind, ep, size, iters, 0)
                    : UcxRuns.stream(apiKind, ucx, ep, mode, size, iters, window);
        }
        return latency ? NioRuns.latency(nio, size, iters, 0) : NioRuns.stream(nio, mode, size, iters);
    }

    private long iterations(String stack, String mode, long size) {
        long iters = iterations(mode, size);
        if (stack.equals("nio") && !Measurement.BANDWIDTH.equals(mode)) {
            // NIO is ~100x slower per message here: a tenth of the rate run and a quarter of the ping-pongs keep
            // each NIO run near a second, with thousands of samples still behind its percentiles
            iters = Math.max(1, iters / (Measurement.RATE.equals(mode) ? 10 : 4));
        }
        return iters;
    }

    /**
     * A Java stack's run is killed past this many seconds, far above its expected time (10 MB/s, 50 us a message,
     * as for {@code ucx_perftest}'s pair): {@code base}, plus {@code messages} of {@code size} bytes at those rates.
     */
    static long limitSeconds(long base, long size, long messages) {
        return base + size * messages / 10_000_000 + messages / 20_000;
    }

    private static long warmupIterations(String mode, long iters) {
        return Math.max(Math.min(iters, Measurement.LATENCY.equals(mode) ? 10_000 : 50_000), iters / 10);
    }

    /**
     * Before the first measurement, a Java stack runs every mode at its smallest and largest size until the
     * JIT has gone quiet ({@link JitWarmup}), for at least {@link #WARMUP_NANOS} and at most 2 s each (plus the pass
     * under way then); each step under a deadline like a measured run's, of 2 s plus two passes' bytes.
     */
    private void settleJit(JavaStacks stacks, UcxRuns.Api apiKind, Ucx ucx, String stack, long[] sz) {
        for (String mode : modes) {
            long smallest = Long.MAX_VALUE, largest = -1;
            for (long s : sz) {
                if (!(mode.equals(Measurement.RATE) && s > 1024)) {
                    smallest = Math.min(smallest, s);
                    largest = Math.max(largest, s);
                }
            }
            for (long size : largest < 0 ? new long[0] : new long[] {smallest, largest}) {
                if (!stacks.usable(stack)) {
                    return;
                }
                System.err.printf(Locale.ROOT, "\r[warm-up] %-8s %-9s %-8s         ", stack, mode,
                        Measurement.human(size));
                long iters = warmupIterations(mode, iterations(stack, mode, size));
                stacks.run(stack, stack + " warm-up " + mode + " " + Measurement.human(size),
                        limitSeconds(122, size, 2 * iters), () -> {
                            JitWarmup.run(() -> pass(apiKind, ucx, stacks.ep, stacks.nio, stack, mode, size, iters),
                                    WARMUP_NANOS, JitWarmup.MAX_NANOS);
                            return null;
                        });
                warmed.add(stack + mode + size);
                if (size == largest) {
                    break;
                }
            }
        }
    }

    /**
     * A Java stack's warm-up: the first time a stack meets a mode and size it repeats for at least
     * {@link #WARMUP_NANOS} (with two busy processes on two cores the JIT's compiler threads get little CPU, and a
     * fixed count measured the interpreter at the first sizes); later rounds run one pass.
     */
    private void warmUp(String what, JitWarmup.Pass pass) throws Exception {
        boolean first = warmed.add(what);
        long t0 = System.nanoTime();
        do {
            pass.run();
        } while (first && System.nanoTime() - t0 < WARMUP_NANOS);
        if (first) {
            firstWarmUpNanos += System.nanoTime() - t0;
        }
    }

    /** Time spent so far in first warm-ups, which only the first round has (for the ETA). */
    private long firstWarmUpNanos;

    private final java.util.Set<String> warmed = new java.util.HashSet<>();

    private static final long WARMUP_NANOS = TimeUnit.MILLISECONDS.toNanos(200);

    /**
     * Iteration counts: each run lasts ~0.05-0.25 s on a laptop-class machine; the default 6 rounds (a balanced
     * order) take as long as 3 rounds of twice these did (the counts before the tenth session: {@code --scale 2}).
     */
    long iterations(String mode, long size) {
        long n = switch (mode) {
            case Measurement.LATENCY -> size <= 4096 ? 10_000 : size <= 65536 ? 2_500 : size <= (1 << 20) ? 500
                    : 150;
            case Measurement.RATE -> 1_000_000; // after the JIT-settling warm-up (shorter runs once measured the JIT)
            default -> Math.max(150, Math.min(50_000, (1L << 29) / size));
        };
        return Math.max(1, (long) (n * scale));
    }

    /**
     * The progress line. Its ETA spreads the time of the runs so far over those left, plus a first warm-up for each
     * run whose kind has not run yet (round 0 has them all: counted in, the ETA read high there).
     */
    private void progress(List<Object[]> plan, int done, long t0, String stack, String mode, long size) {
        int total = plan.size();
        long elapsed = System.nanoTime() - t0 - firstWarmUpNanos;
        java.util.Set<String> cold = new java.util.HashSet<>();
        for (Object[] run : plan.subList(done, total)) {
            String key = (String) run[0] + run[1] + run[2];
            if (!run[0].equals("perftest") && !warmed.contains(key)) {
                cold.add(key);
            }
        }
        String eta = done == 0 ? "?" : String.valueOf(TimeUnit.NANOSECONDS.toSeconds(
                Math.max(0, elapsed) / done * (total - done) + cold.size() * WARMUP_NANOS));
        System.err.printf(Locale.ROOT, "\r[%d/%d] %-8s %-9s %-8s ETA %s s   ", done + 1, total, stack, mode,
                Measurement.human(size), eta);
    }

    private Process startServer() throws Exception {
        List<String> cmd = new ArrayList<>(Main.selfCommand("bench", "sweep-server", "--parent-pid",
                String.valueOf(ProcessHandle.current().pid()), "--error-handling",
                errorHandling, "--progress", progress, "--transport", transport));
        if (pullBudget != null) {
            cmd.addAll(List.of("--pull-budget", pullBudget));
        }
        return new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.INHERIT).start();
    }

    /** The other side of the sweep: one ucx4j endpoint and one NIO connection, serving commands. */
    @Command(name = "sweep-server", hidden = true)
    static final class Server implements Callable<Integer> {
        @Option(names = "--error-handling", defaultValue = "peer")
        String errorHandling;

        @Option(names = "--parent-pid", required = true)
        long parentPid;

        @Option(names = "--pull-budget")
        String pullBudget;

        @Option(names = "--progress", defaultValue = "caller")
        String progress;

        @Option(names = "--transport", defaultValue = "auto")
        String transport;

        @Override
        public Integer call() throws Exception {
            Children.exitWithParent(parentPid);
            ProgressMode mode = SendRecvBench.progressMode(progress);
            UcxOptions o = UcxOptions.defaults().withProgressMode(mode)
                    .withPeerErrorHandling(peerErrors(errorHandling)).withName("sweep-server")
                    .withHostMemoryOnly(true);
            String tls = SendRecvBench.tls(transport);
            if (tls != null) {
                o = o.with("TLS", tls);
            }
            if (pullBudget != null) {
                o = o.withPullBudget(Measurement.parseSize(pullBudget));
            }
            try (Ucx ucx = Ucx.open(o);
                    ServerSocketChannel nioServer = NioRuns.bind()) {
                CompletableFuture<Endpoint> accepted = new CompletableFuture<>();
                try (Listener l = ucx.listen("127.0.0.1", 0, accepted::complete)) {
                    Thread nio = Thread.ofPlatform().name("nio-server").start(() -> NioRuns.serve(nioServer));
                    System.out.println("PORTS " + l.port() + " " + nioServer.socket().getLocalPort());
                    System.out.flush();
                    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
                    while (!accepted.isDone() && System.nanoTime() < deadline) {
                        if (mode != ProgressMode.CALLER) {
                            Thread.sleep(1); // the progress thread accepts
                        } else if (ucx.progress() == 0) {
                            Thread.sleep(1);
                        }
                    }
                    try (Endpoint ep = accepted.getNow(null)) {
                        if (ep == null) {
                            return 1;
                        }
                        UcxRuns.serve(ucx, ep);
                    } catch (RuntimeException e) { // the client left ucx4j out: NIO may still run
                        System.err.println("\nucx4j: sweep server: the ucx4j runs ended: " + e);
                    }
                    nio.join(); // ends with the client's QUIT or its socket (this process ends with the client)
                }
            }
            return 0;
        }
    }
}
