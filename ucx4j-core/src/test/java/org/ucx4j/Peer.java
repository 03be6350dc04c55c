package org.ucx4j;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

/** A second JVM running {@link PeerMain}; killed with SIGKILL or at close. */
final class Peer implements AutoCloseable {
    final Process process;
    private final BufferedReader out;

    private Peer(Process p) {
        this.process = p;
        this.out = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8));
    }

    static Peer start(Map<String, String> env, List<String> jvmArgs, String... args) throws IOException {
        return startWith(List.of(), env, jvmArgs, args);
    }

    /** Starts the JVM through {@code prefix} (a command that runs the rest, such as {@link Hosts#on}). */
    static Peer startWith(List<String> prefix, Map<String, String> env, List<String> jvmArgs, String... args)
            throws IOException {
        List<String> cmd = new ArrayList<>(prefix);
        cmd.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        String flags = System.getProperty("ucx4j.test.jvm", "--enable-native-access=ALL-UNNAMED");
        for (String f : flags.trim().split("\\s+")) {
            if (!f.isEmpty()) {
                cmd.add(f);
            }
        }
        cmd.addAll(jvmArgs);
        cmd.add("-cp");
        cmd.add(System.getProperty("java.class.path"));
        cmd.add(PeerMain.class.getName());
        cmd.addAll(List.of(args));
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.INHERIT);
        env.forEach((k, v) -> { // a null value: the variable is removed
            if (v == null) {
                pb.environment().remove(k);
            } else {
                pb.environment().put(k, v);
            }
        });
        return new Peer(pb.start());
    }

    static Peer start(String... args) throws IOException {
        return start(Map.of(), List.of(), args);
    }

    /** Reads stdout until a line starting with {@code prefix}; returns the rest of it. */
    String await(String prefix) throws Exception {
        CompletableFuture<String> f = CompletableFuture.supplyAsync(() -> {
            try {
                String line;
                while ((line = out.readLine()) != null) {
                    if (line.startsWith(prefix)) {
                        return line.substring(prefix.length()).trim();
                    }
                }
                return null;
            } catch (IOException e) {
                throw new RuntimeException(e);
            }
        });
        String s = f.get(60, TimeUnit.SECONDS);
        if (s == null) {
            throw new IllegalStateException("peer exited before printing " + prefix + " (exit "
                    + process.waitFor() + ")");
        }
        return s;
    }

    /** Reads stdout until the process exits (bounded); returns every line. */
    List<String> awaitExit() throws Exception {
        CompletableFuture<List<String>> f = CompletableFuture.supplyAsync(() -> {
            List<String> lines = new ArrayList<>();
            try {
                String line;
                while ((line = out.readLine()) != null) {
                    lines.add(line);
                }
            } catch (IOException e) {
                throw new RuntimeException(e);
            }
            return lines;
        });
        List<String> lines = f.get(60, TimeUnit.SECONDS);
        process.waitFor(30, TimeUnit.SECONDS);
        return lines;
    }

    void kill() throws InterruptedException {
        process.destroyForcibly(); // SIGKILL on Unix
        process.waitFor(30, TimeUnit.SECONDS);
    }

    @Override
    public void close() throws InterruptedException {
        if (process.isAlive()) {
            kill();
        }
    }
}
