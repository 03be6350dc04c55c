package org.ucx4j.cli;

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.ucx4j.Ucx;

/**
 * UCX's own C benchmark, run as a server and a client process per measurement. With {@code errModePeer} it uses
 * {@code -e} (peer failure detection), the same endpoint setup ucx4j uses; both modes run with ucx4j's UCX
 * environment ({@link Ucx#environmentDefaults()}: posix error handling, allocation order, segment sizes), so the
 * comparison is like for like.
 * Its MB/s are 2^20 B/s; they are converted to 10^6.
 */
final class PerftestRuns {
    private final String binary;
    private final boolean errModePeer;
    /** UCX_TLS for ucx_perftest, as the ucx4j side is given it (null: the environment's, or UCX's choice). */
    private final String tls;

    PerftestRuns(boolean errModePeer, String tls) {
        this.binary = find();
        this.errModePeer = errModePeer;
        this.tls = tls;
    }

    boolean available() {
        return binary != null;
    }

    /** The {@code ucx_perftest} of the UCX ucx4j loads: the configured install's, else the first on the PATH. */
    static String find() {
        String home = System.getProperty("ucx4j.ucx.home", System.getenv("UCX4J_UCX_HOME"));
        if (home != null && !home.isBlank()) {
            File f = new File(home, "bin/ucx_perftest");
            if (f.canExecute()) {
                return f.getPath();
            }
        }
        for (String dir : System.getenv().getOrDefault("PATH", "/usr/bin").split(File.pathSeparator)) {
            File f = new File(dir, "ucx_perftest");
            if (f.canExecute()) {
                return f.getPath();
            }
        }
        return null;
    }

    /**
     * Which {@code ucx_perftest} runs and the version of its UCX (as {@code ucx_info -v} beside it reports it), with
     * a note when that differs from {@code ucx4jVersion}, the UCX ucx4j loaded: the comparison is then between two
     * UCX builds.
     */
    String describe(String ucx4jVersion) {
        String version = null;
        String unknown = "no ucx_info beside it";
        File info = new File(new File(binary).getParentFile(), "ucx_info");
        if (info.canExecute()) {
            unknown = info + " -v did not say";
            try {
                // its few lines fit the pipe: it ends without being read, and a hung one is not waited on
                Process p = new ProcessBuilder(info.getPath(), "-v").redirectErrorStream(true).start();
                if (p.waitFor(10, TimeUnit.SECONDS)) {
                    version = versionOf(new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8));
                }
                p.destroyForcibly();
            } catch (IOException e) {
                unknown = info + " -v failed: " + e.getMessage();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
        if (version == null) {
            return binary + " (its UCX version unknown: " + unknown + ")";
        }
        return binary + " (UCX " + version + ")" + (version.equals(ucx4jVersion) ? ""
                : "; it differs from the UCX " + ucx4jVersion + " that ucx4j loaded");
    }

    /**
     * The library version in {@code ucx_info -v}'s output ("# Version 1.13.1" up to 1.13, "# Library version:
     * 1.20.1" since), or null.
     */
    static String versionOf(String ucxInfoOutput) {
        java.util.regex.Matcher m = java.util.regex.Pattern.compile(
                "(?m)^# (?:Library version:|Version) (\\d+\\.\\d+\\.\\d+)")
                .matcher(ucxInfoOutput);
        return m.find() ? m.group(1) : null;
    }

    /** ucx_perftest's test for an API and mode. */
    static String test(UcxRuns.Api api, String mode) {
        boolean lat = Measurement.LATENCY.equals(mode);
        return switch (api) {
            case TAG -> lat ? "tag_lat" : "tag_bw";
            case AM, AM_HANDLER -> lat ? "ucp_am_lat" : "ucp_am_bw";
            case STREAM -> lat ? "stream_lat" : "stream_bw";
            case RMA -> "ucp_get";
        };
    }

    /**
     * One measurement. {@code window}: outstanding operations in bandwidth and rate mode, ucx4j's window, given as
     * {@code -O} (without it each test keeps its own: 32 for {@code tag_bw} and {@code ucp_am_bw}, but 1 for
     * {@code stream_bw} and {@code ucp_get}, which then ran one operation at a time against ucx4j's 32).
     */
    Measurement run(UcxRuns.Api api, String mode, long size, long iters, long warmup, int window)
            throws IOException, InterruptedException {
        String test = test(api, mode);
        int port;
        try (ServerSocket s = new ServerSocket(0)) {
            port = s.getLocalPort();
        }
        List<String> common = new ArrayList<>(List.of("-t", test, "-s", String.valueOf(size), "-n",
                String.valueOf(iters), "-w", String.valueOf(warmup), "-p", String.valueOf(port)));
        if (errModePeer) {
            common.add("-e");
        }
        if (!Measurement.LATENCY.equals(mode)) {
            common.addAll(List.of("-O", String.valueOf(window)));
        }
        List<String> server = new ArrayList<>(List.of(binary));
        server.addAll(common);
        // far above the run's expected time (10 MB/s, 50 us a message): a wedged pair is killed, not waited on
        long limitSeconds = 60 + (iters + warmup) * size / 10_000_000 + (iters + warmup) / 20_000;
        Process srv = start(server, true);
        try {
            List<String> client = new ArrayList<>(List.of(binary, "127.0.0.1"));
            client.addAll(common);
            // the server listens a moment after it starts: a client refused meanwhile is started again
            for (int attempt = 0; attempt < 50; attempt++) {
                Thread.sleep(attempt == 0 ? 150 : 100);
                Process cli = start(client, false);
                // a client that hangs is killed, which ends the read below: the sweep never waits forever
                Thread.ofVirtual().start(() -> {
                    try {
                        if (!cli.waitFor(limitSeconds, TimeUnit.SECONDS)) {
                            cli.destroyForcibly();
                        }
                    } catch (InterruptedException e) {
                        cli.destroyForcibly();
                    }
                });
                String fin = null;
                java.util.ArrayDeque<String> tail = new java.util.ArrayDeque<>();
                try (BufferedReader r = new BufferedReader(new InputStreamReader(cli.getInputStream(),
                        StandardCharsets.UTF_8))) {
                    String line;
                    while ((line = r.readLine()) != null) {
                        if (line.startsWith("Final:")) {
                            fin = line;
                        }
                        if (tail.size() == TAIL_LINES) {
                            tail.removeFirst();
                        }
                        tail.addLast(line);
                    }
                } finally {
                    if (cli.isAlive() && !cli.waitFor(5, TimeUnit.SECONDS)) {
                        cli.destroyForcibly();
                    }
                }
                int exit = cli.isAlive() ? -1 : cli.exitValue();
                if (fin != null && exit == 0) {
                    Measurement m = parse(fin, mode, size);
                    if (m.iters() != iters) {
                        throw new IOException("ucx_perftest ran " + m.iters() + " iterations, not " + iters);
                    }
                    return m;
                }
                boolean refused = tail.stream().anyMatch(l -> l.contains("connect() failed"));
                if (!refused || !srv.isAlive()) {
                    throw new IOException("ucx_perftest client " + (exit < 0 ? "killed" : "exited with " + exit)
                            + (srv.isAlive() ? "" : ", its server with " + srv.exitValue()) + "; its last output: "
                            + String.join(" | ", tail));
                }
            }
            throw new IOException("ucx_perftest client never connected");
        } finally {
            srv.destroy();
            srv.waitFor(5, TimeUnit.SECONDS);
            srv.destroyForcibly();
        }
    }

    private static final int TAIL_LINES = 12;

    private Process start(List<String> cmd, boolean quiet) throws IOException {
        // the pair dies with the sweep even when it is killed outright (its server would wait for a client forever)
        ProcessBuilder pb = new ProcessBuilder(Children.endingWithThisProcess(cmd)).redirectErrorStream(true);
        if (quiet) {
            pb.redirectOutput(ProcessBuilder.Redirect.DISCARD);
        }
        Map<String, String> env = pb.environment();
        // ucx4j's UCX environment (posix error handling, posix memory first for RMA targets, 32 KiB shared-memory
        // segments...), so both stacks run on the same transport setup
        for (var e : Ucx.environmentDefaults().entrySet()) {
            env.putIfAbsent(e.getKey(), e.getValue());
        }
        if (!errModePeer) { // as ucx4j gives UCX without peer error handling (checked endpoint ids on the wire)
            env.putIfAbsent("UCX_PROTO_INDIRECT_ID", "on");
        }
        if (tls != null) {
            env.put("UCX_TLS", tls);
        }
        return pb.start();
    }

    /** "Final: iters typical_lat avg_lat overall_lat avg_bw overall_bw avg_mr overall_mr". */
    static Measurement parse(String line, String mode, long size) {
        String[] f = line.substring("Final:".length()).trim().split("\\s+");
        long iters = Long.parseLong(f[0]);
        double typicalUs = Double.parseDouble(f[1]);
        double overallUs = Double.parseDouble(f[3]);
        double mbps = Double.parseDouble(f[5]) * 1.048576;
        double rate = Double.parseDouble(f[7]);
        if (Measurement.LATENCY.equals(mode)) {
            return new Measurement("perftest", mode, size, iters, typicalUs, Double.NaN, overallUs, mbps, rate);
        }
        return new Measurement("perftest", mode, size, iters, Double.NaN, Double.NaN, overallUs, mbps, rate);
    }
}
