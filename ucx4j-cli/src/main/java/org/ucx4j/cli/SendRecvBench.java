package org.ucx4j.cli;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.HdrHistogram.Histogram;
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

    @Option(names = "--port", defaultValue = "0", description = "server port (0 = ephemeral)")
    int port;

    @Option(names = "--size", defaultValue = "8", description = "message size in bytes")
    long size;

    @Option(names = "--iters", defaultValue = "100000", description = "measured iterations")
    int iters;

    @Option(names = "--warmup", defaultValue = "10000", description = "warm-up iterations")
    int warmup;

    @Option(names = "--mode", defaultValue = "latency", description = "latency or bandwidth")
    String mode;

    @Option(names = "--window", defaultValue = "32", description = "outstanding sends in bandwidth mode")
    int window;

    @Option(names = "--transport", defaultValue = "auto", description = "auto, shm or tcp")
    String transport;

    @Option(names = "--progress", defaultValue = "caller", description = "caller (owner thread) or thread")
    String progress;

    @Option(names = "--format", defaultValue = "table", description = "table or json")
    String format;

    static final int TAG = 1, ACK = 2;

    private UcxOptions options() {
        UcxOptions o = UcxOptions.defaults().withProgressMode(
                "thread".equals(progress) ? ProgressMode.BACKOFF : ProgressMode.CALLER);
        String tls = tls();
        return tls == null ? o : o.with("TLS", tls);
    }

    private String tls() {
        return switch (transport) {
            case "auto" -> null;
            case "tcp" -> "tcp,rdmacm,sockcm";
            case "shm" -> "shm,tcp,rdmacm,sockcm";
            default -> throw new IllegalArgumentException("--transport must be auto, shm or tcp");
        };
    }

    @Override
    public Integer call() throws Exception {
        if (!"latency".equals(mode) && !"bandwidth".equals(mode)) {
            throw new IllegalArgumentException("--mode must be latency or bandwidth");
        }
        if (server) {
            runServer();
            return 0;
        }
        if (client != null) {
            int c = client.lastIndexOf(':');
            report(runClient(client.substring(0, c), Integer.parseInt(client.substring(c + 1))));
            return 0;
        }
        // spawn the server as a second process, then run the client here
        List<String> cmd = Main.selfCommand("bench", "send-recv", "--server", "--size", String.valueOf(size),
                "--iters", String.valueOf(iters), "--warmup", String.valueOf(warmup), "--mode", mode, "--window",
                String.valueOf(window), "--transport", transport, "--progress", progress);
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.INHERIT);
        if (tls() != null) {
            pb.environment().put("UCX_TLS", tls());
        }
        Process p = pb.start();
        try {
            BufferedReader r = new BufferedReader(new InputStreamReader(p.getInputStream()));
            String line;
            int serverPort = -1;
            while ((line = r.readLine()) != null) {
                if (line.startsWith("PORT ")) {
                    serverPort = Integer.parseInt(line.substring(5).trim());
                    break;
                }
            }
            if (serverPort < 0) {
                System.err.println("ucx4j: the server process did not start (exit " + p.waitFor() + ")");
                return 1;
            }
            report(runClient("127.0.0.1", serverPort));
            p.waitFor(30, TimeUnit.SECONDS);
            return 0;
        } finally {
            p.destroyForcibly();
        }
    }

    private void runServer() throws Exception {
        try (Ucx ucx = Ucx.open(options().withName("bench-server"))) {
            CompletableFuture<Endpoint> accepted = new CompletableFuture<>();
            try (Listener l = ucx.listen(port, accepted::complete)) {
                System.out.println("PORT " + l.port());
                System.out.flush();
                while (!accepted.isDone()) {
                    if ("caller".equals(progress)) {
                        ucx.progress();
                    } else {
                        Thread.onSpinWait();
                    }
                }
                Endpoint ep = accepted.get();
                try (Arena arena = Arena.ofShared()) {
                    MemorySegment buf = arena.allocate(Math.max(1, size)).asSlice(0, size);
                    int total = warmup + iters;
                    if ("latency".equals(mode)) {
                        for (int i = 0; i < total; i++) {
                            ep.recv(buf, TAG);
                            ep.send(buf, TAG);
                        }
                    } else {
                        List<CompletableFuture<Long>> pending = new ArrayList<>(window);
                        for (int i = 0; i < total; i += window) {
                            int n = Math.min(window, total - i);
                            for (int k = 0; k < n; k++) {
                                pending.add(ep.recvAsync(buf, TAG));
                            }
                            for (CompletableFuture<Long> f : pending) {
                                while (!f.isDone()) {
                                    poll(ucx);
                                }
                            }
                            pending.clear();
                        }
                        ep.send(new byte[1], ACK);
                    }
                    ep.recv(new byte[1], ACK, Duration.ofSeconds(30)); // client says goodbye
                }
                ep.close();
            }
        }
    }

    private void poll(Ucx ucx) {
        if ("caller".equals(progress)) {
            ucx.progress();
        } else {
            Thread.onSpinWait();
        }
    }

    record Result(String mode, long size, int iters, double p50us, double p99us, double meanUs, double mbps,
            String lanes) {}

    private Result runClient(String host, int serverPort) throws Exception {
        try (Ucx ucx = Ucx.open(options().withName("bench-client"));
                Endpoint ep = ucx.connect(host, serverPort, Duration.ofSeconds(10));
                Arena arena = Arena.ofShared()) {
            MemorySegment buf = arena.allocate(Math.max(1, size)).asSlice(0, size);
            Result result;
            if ("latency".equals(mode)) {
                Histogram h = new Histogram(3_600_000_000L, 3);
                for (int i = 0; i < warmup; i++) {
                    ep.send(buf, TAG);
                    ep.recv(buf, TAG);
                }
                long start = System.nanoTime();
                for (int i = 0; i < iters; i++) {
                    long t0 = System.nanoTime();
                    ep.send(buf, TAG);
                    ep.recv(buf, TAG);
                    h.recordValue((System.nanoTime() - t0) / 2);
                }
                long elapsed = System.nanoTime() - start;
                double mean = elapsed / 2.0 / iters / 1000.0;
                result = new Result(mode, size, iters, h.getValueAtPercentile(50) / 1000.0,
                        h.getValueAtPercentile(99) / 1000.0, mean, size * (double) iters / (elapsed / 2.0) * 1e3,
                        lanes(ep));
            } else {
                List<CompletableFuture<Long>> pending = new ArrayList<>(window);
                long start = 0;
                int total = warmup + iters;
                for (int i = 0; i < total; i += window) {
                    if (i >= warmup && start == 0) {
                        start = System.nanoTime();
                    }
                    int n = Math.min(window, total - i);
                    for (int k = 0; k < n; k++) {
                        pending.add(ep.sendAsync(buf, TAG));
                    }
                    for (CompletableFuture<Long> f : pending) {
                        while (!f.isDone()) {
                            poll(ucx);
                        }
                        f.join();
                    }
                    pending.clear();
                }
                ep.recv(new byte[1], ACK, Duration.ofSeconds(60));
                long elapsed = System.nanoTime() - start;
                double perMsgUs = elapsed / 1000.0 / iters;
                result = new Result(mode, size, iters, Double.NaN, Double.NaN, perMsgUs,
                        size * (double) iters / elapsed * 1e3, lanes(ep));
            }
            ep.send(new byte[1], ACK);
            return result;
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

    private void report(Result r) throws Exception {
        if ("json".equals(format)) {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("stack", "ucx4j");
            m.put("api", "tag");
            m.put("mode", r.mode());
            m.put("size", r.size());
            m.put("iters", r.iters());
            m.put("p50_us", Double.isNaN(r.p50us()) ? null : r.p50us());
            m.put("p99_us", Double.isNaN(r.p99us()) ? null : r.p99us());
            m.put("mean_us", r.meanUs());
            m.put("mbps", r.mbps());
            m.put("transport", transport);
            m.put("progress", progress);
            m.put("lanes", r.lanes());
            System.out.println(new ObjectMapper().writeValueAsString(m));
            return;
        }
        System.out.printf("ucx4j bench send-recv  mode=%s  transport=%s  progress=%s  lanes: %s%n", r.mode(),
                transport, progress, r.lanes());
        System.out.printf("%10s %10s %10s %10s %10s %12s%n", "size", "iters", "p50 us", "p99 us", "mean us", "MB/s");
        System.out.printf("%10d %10d %10.3f %10.3f %10.3f %12.1f%n", r.size(), r.iters(), r.p50us(), r.p99us(),
                r.meanUs(), r.mbps());
    }
}
