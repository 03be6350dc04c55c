package org.ucx4j.cli;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.List;
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
 * Tag ping-pong (latency) or one-way streaming (bandwidth) between two processes over a listener-connected,
 * failure-detecting endpoint. Both sides progress the worker on their own thread (caller-driven mode).
 */
@Command(name = "send-recv", description = "Tag send/recv latency or bandwidth between two processes.")
final class SendRecvBench implements Callable<Integer> {
    @Option(names = "--server", description = "run only the server side and print its port")
    boolean server;

    @Option(names = "--client", paramLabel = "HOST:PORT", description = "run only the client side against a server")
    String client;

    /** Set on the server this command spawns: it ends with this process ({@link Children#exitWithParent}). */
    @Option(names = "--parent-pid", hidden = true, defaultValue = "0")
    long parentPid;

    @Option(names = "--port", defaultValue = "0", description = "server port (0 = ephemeral)")
    int port;

    @Option(names = "--size", defaultValue = "8", converter = SizeConverter.class,
            description = "message size in bytes (k and m suffixes: 64k, 4m)")
    long size;

    /** {@code --size 4m}, as {@code bench sweep --sizes} takes it. */
    static final class SizeConverter implements picocli.CommandLine.ITypeConverter<Long> {
        @Override
        public Long convert(String value) {
            return value.trim().equals("0") ? 0L : Measurement.parseSize(value);
        }
    }

    @Option(names = "--iters", defaultValue = "100000", description = "measured iterations")
    int iters;

    @Option(names = "--warmup", defaultValue = "10000", description = "warm-up iterations per pass; passes repeat "
            + "until the JIT goes quiet, at most 2 s (0: no warm-up)")
    int warmup;

    @Option(names = "--mode", defaultValue = "latency", description = "latency or bandwidth")
    String mode;

    @Option(names = "--api", defaultValue = "tag", description = "tag, am (active messages), am-handler (taken by a "
            + "handler on the server's worker thread), stream or rma (get)")
    String api;

    @Option(names = "--window", defaultValue = "32", description = "outstanding sends in bandwidth mode")
    int window;

    @Option(names = "--transport", defaultValue = "auto", description = "auto, shm (UCX_TLS=shm,tcp: ucx_perftest "
            + "with peer error handling needs a TCP lane beside shared memory; the lanes used are printed) or tcp")
    String transport;

    @Option(names = "--progress", defaultValue = "caller", description = "caller (the measuring thread drives the "
            + "worker), or a progress thread: thread (= backoff), backoff, blocking or polling")
    String progress;

    @Option(names = "--format", defaultValue = "table", description = "table or json")
    String format;

    @Option(names = "--error-handling", defaultValue = "peer",
            description = "peer (UCX peer error handling, ucx4j's default) or none (both sides)")
    String errorHandling;

    private UcxOptions options() {
        UcxOptions o = UcxOptions.defaults().withProgressMode(progressMode())
                .withPeerErrorHandling(SweepBench.peerErrors(errorHandling))
                .withHostMemoryOnly(true); // host buffers, as ucx_perftest is told (-m host)
        String tls = tls(transport);
        return tls == null ? o : o.with("TLS", tls);
    }

    /**
     * {@code --transport}: the UCX_TLS it stands for (null: UCX's choice). {@code shm} keeps TCP in the list:
     * {@code ucx_perftest -e} finds shared-memory-only peers unreachable on UCX 1.13 (no lane for its keepalive);
     * ucx4j's endpoints still take shared memory, as their printed lanes show.
     */
    static String tls(String transport) {
        return switch (transport) {
            case "auto" -> null;
            case "tcp" -> "tcp";
            case "shm" -> "shm,tcp";
            default -> throw new UsageException("--transport must be auto, shm or tcp");
        };
    }

    /** The largest {@code --size}: the server's buffers (as {@code bench sweep}'s). */
    static final long MAX_SIZE = 64L << 20;

    /** Refuses bad arguments before any process or worker is started. */
    private void check() {
        if (!"latency".equals(mode) && !"bandwidth".equals(mode)) {
            throw new UsageException("--mode must be latency or bandwidth, got " + mode);
        }
        if (!"table".equals(format) && !"json".equals(format)) {
            throw new UsageException("--format must be table or json, got " + format);
        }
        if (size < 0 || size > MAX_SIZE) {
            throw new UsageException("--size must be 0 to 64m, got " + size);
        }
        if (iters <= 0 || warmup < 0 || window <= 0) {
            throw new UsageException("--iters and --window must be positive and --warmup not negative, got "
                    + iters + ", " + window + " and " + warmup);
        }
        UcxRuns.Api.parse(api).checkSize(size);
        tls(transport);
        progressMode(progress);
        SweepBench.peerErrors(errorHandling);
    }

    @Override
    public Integer call() throws Exception {
        check();
        if (server) {
            runServer();
            return 0;
        }
        if (client != null) {
            int c = client.lastIndexOf(':');
            if (c <= 0 || c == client.length() - 1) {
                throw new UsageException("--client takes HOST:PORT, got " + client);
            }
            String host = client.substring(0, c);
            if (host.startsWith("[") && host.endsWith("]")) { // [::1]:port
                host = host.substring(1, host.length() - 1);
            }
            int serverPort;
            try {
                serverPort = Integer.parseInt(client.substring(c + 1));
            } catch (NumberFormatException e) {
                throw new UsageException("--client takes HOST:PORT, got " + client);
            }
            report(runClient(host, serverPort));
            return 0;
        }
        // spawn the server as a second process, then run the client here
        List<String> cmd = Main.selfCommand("bench", "send-recv", "--server", "--parent-pid",
                String.valueOf(ProcessHandle.current().pid()), "--size", String.valueOf(size),
                "--iters", String.valueOf(iters), "--warmup", String.valueOf(warmup), "--mode", mode, "--window",
                String.valueOf(window), "--transport", transport, "--progress", progress, "--error-handling",
                errorHandling);
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.INHERIT);
        if (tls(transport) != null) {
            pb.environment().put("UCX_TLS", tls(transport));
        }
        Process p = pb.start();
        try {
            String line = Children.awaitLine(p, "PORT ", Duration.ofSeconds(60));
            if (line == null) {
                p.waitFor(5, TimeUnit.SECONDS);
                System.err.println("ucx4j: the server process did not start"
                        + (p.isAlive() ? "" : " (exit " + p.exitValue() + ")"));
                return 1;
            }
            report(runClient("127.0.0.1", Integer.parseInt(line.substring(5).trim())));
            p.waitFor(30, TimeUnit.SECONDS);
            return 0;
        } finally {
            p.destroyForcibly();
        }
    }

    private ProgressMode progressMode() {
        return progressMode(progress);
    }

    /** {@code --progress} of the benchmarks: caller, thread (= backoff), backoff, blocking or polling. */
    static ProgressMode progressMode(String progress) {
        return switch (progress) {
            case "caller" -> ProgressMode.CALLER;
            case "thread", "backoff" -> ProgressMode.BACKOFF;
            case "blocking" -> ProgressMode.BLOCKING;
            case "polling" -> ProgressMode.POLLING;
            default -> throw new UsageException(
                    "--progress: caller, thread, backoff, blocking or polling, not " + progress);
        };
    }

    private void runServer() throws Exception {
        if (parentPid != 0) {
            Children.exitWithParent(parentPid);
        }
        try (Ucx ucx = Ucx.open(options().withName("bench-server"))) {
            CompletableFuture<Endpoint> accepted = new CompletableFuture<>();
            try (Listener l = ucx.listen(port, accepted::complete)) {
                System.out.println("PORT " + l.port());
                System.out.flush();
                while (!accepted.isDone()) { // a client may take its time: wait without spinning a core
                    if (!"caller".equals(progress)) {
                        accepted.join(); // the progress thread accepts
                    } else if (ucx.progress() == 0) {
                        Thread.sleep(1);
                    }
                }
                try (Endpoint ep = accepted.get()) {
                    UcxRuns.serve(ucx, ep); // the same command protocol as bench sweep
                }
            }
        }
    }

    /** A run's figures, the lanes it used and its endpoint's per-peer statistics ({@code EndpointStats.summary}). */
    record Result(Measurement m, String lanes, String peerStats) {}

    private Result runClient(String host, int serverPort) throws Exception {
        try (Ucx ucx = Ucx.open(options().withName("bench-client"));
                Endpoint ep = ucx.connect(host, serverPort, Duration.ofSeconds(10))) {
            UcxRuns.Api a = UcxRuns.Api.parse(api);
            boolean latency = "latency".equals(mode);
            if (warmup > 0) { // --warmup iterations per pass, repeated until this JVM's JIT goes quiet (<= 2 s)
                JitWarmup.run(() -> {
                    if (latency) {
                        UcxRuns.latency(a, ep, size, warmup, 0);
                    } else {
                        UcxRuns.stream(a, ucx, ep, mode, size, warmup, window);
                    }
                }, 0, JitWarmup.MAX_NANOS);
            }
            Measurement m = latency ? UcxRuns.latency(a, ep, size, iters, 0)
                    : UcxRuns.stream(a, ucx, ep, mode, size, iters, window);
            String lanes = lanes(ep);
            String stats = ep.stats().summary();
            UcxRuns.quit(ep);
            return new Result(m, lanes, stats);
        }
    }

    private static String lanes(Endpoint ep) {
        StringBuilder sb = new StringBuilder();
        for (String l : ep.info().split("\n")) {
            if (l.contains("lane[")) {
                String t = l.substring(l.indexOf(':') + 1).trim();
                sb.append(sb.isEmpty() ? "" : "; ").append(t.split("\\s+")[0].replaceFirst("^\\d+:", ""));
            }
        }
        return sb.toString();
    }

    private void report(Result res) throws Exception {
        Measurement r = res.m();
        if ("json".equals(format)) {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("stack", "ucx4j");
            m.put("api", UcxRuns.Api.parse(api).cli());
            m.put("mode", r.mode());
            m.put("size", r.size());
            m.put("iters", r.iters());
            m.put("p50_us", Double.isNaN(r.p50Us()) ? null : r.p50Us());
            m.put("p99_us", Double.isNaN(r.p99Us()) ? null : r.p99Us());
            m.put("mean_us", r.meanUs());
            m.put("mbps", r.mbps());
            m.put("msgs_per_s", r.msgsPerS());
            m.put("transport", transport);
            m.put("progress", progress);
            m.put("error_handling", errorHandling);
            m.put("lanes", res.lanes());
            if (!"latency".equals(mode)) {
                m.put("peer_stats", res.peerStats());
            }
            System.out.println(new ObjectMapper().writeValueAsString(m));
            return;
        }
        System.out.printf("ucx4j bench send-recv  api=%s  mode=%s  transport=%s  progress=%s  error-handling=%s  "
                + "lanes: %s%n", api, r.mode(), transport, progress, errorHandling, res.lanes());
        System.out.printf("%10s %10s %10s %10s %10s %12s%n", "size", "iters", "p50 us", "p99 us", "mean us", "MB/s");
        System.out.printf("%10d %10d %10.3f %10.3f %10.3f %12.1f%n", r.size(), r.iters(), r.p50Us(), r.p99Us(),
                r.meanUs(), r.mbps());
        if (!"latency".equals(mode)) {
            System.out.println();
            System.out.println("per-peer bandwidth of transfers >= 1 MB (Endpoint.stats(): 25% 50% 75% (total bytes))");
            System.out.println("(bench-client,bench-server) | " + res.peerStats());
        }
    }
}
