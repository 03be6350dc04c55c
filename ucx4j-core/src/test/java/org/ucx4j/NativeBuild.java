package org.ucx4j;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * Compiles a test's plain C program with gcc against the UCX the tests run on: the system's, or the install prefix
 * named by {@code UCX4J_UCX_HOME} (its headers, and its libraries at link and at run time, so a C peer never
 * talks to ucx4j from another UCX version than the one under test).
 */
final class NativeBuild {
    private NativeBuild() {}

    /** The UCX install prefix under test, or null for the system's. */
    static String home() {
        String h = System.getenv("UCX4J_UCX_HOME");
        return h == null || h.isBlank() ? null : h;
    }

    /** Builds {@code /native/<name>.c} from the test resources into {@code dir}; {@code libs}: e.g. -lucp. */
    static Path build(Path dir, String name, String... libs) throws Exception {
        Path src = dir.resolve(name + ".c");
        for (String file : List.of(name + ".c", "parent_watch.h")) { // the header the C peers include
            try (var in = NativeBuild.class.getResourceAsStream("/native/" + file)) {
                Files.write(dir.resolve(file), in.readAllBytes());
            }
        }
        Path exe = dir.resolve(name);
        List<String> cmd = new ArrayList<>(List.of("gcc", "-o", exe.toString(), src.toString()));
        String home = home();
        if (home != null) {
            // the first folder that holds libucp, in the order ucx4j itself looks (UcxLibrary)
            String lib = home + "/lib";
            for (String sub : List.of("lib", "lib64", "lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu")) {
                if (Files.exists(Path.of(home, sub, "libucp.so"))) {
                    lib = home + "/" + sub;
                    break;
                }
            }
            cmd.addAll(List.of("-I", home + "/include", "-L", lib, "-Wl,-rpath," + lib));
        }
        cmd.addAll(List.of(libs));
        Process cc = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        String out = new String(cc.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertEquals(0, cc.waitFor(), "gcc failed (are the UCX headers installed? apt-get install libucx-dev): "
                + cmd + "\n" + out);
        return exe;
    }

    /**
     * The C program's next line of its own, skipping UCX's log lines (UCX logs to stdout, e.g. warnings about
     * environment variables its transports did not use), or a failure after 30 s: a stalled child fails the test,
     * never hangs it (the caller's cleanup kills the child, which ends the read).
     */
    static String nextLine(java.io.BufferedReader in) throws Exception {
        java.util.concurrent.CompletableFuture<String> line = new java.util.concurrent.CompletableFuture<>();
        Thread.ofVirtual().start(() -> {
            try {
                String l;
                while ((l = in.readLine()) != null && UCX_LOG.matcher(l).find()) {
                    System.err.println("(C program) " + l);
                }
                line.complete(l);
            } catch (java.io.IOException e) {
                line.completeExceptionally(e);
            }
        });
        return line.get(30, java.util.concurrent.TimeUnit.SECONDS);
    }

    private static final java.util.regex.Pattern UCX_LOG = java.util.regex.Pattern.compile(
            "^\\[\\d+\\.\\d+\\] \\[[^]]*\\] .* UCX {1,2}[A-Z]+ ");
}
