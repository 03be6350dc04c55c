package org.ucx4j.cli;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.stream.Stream;

/** The benchmarks' child processes: none outlives the command, and none is waited on without a bound. */
final class Children {
    private Children() {}

    /** At JVM exit (a finished command, Ctrl-C, SIGTERM), every process this one started is killed. */
    static void killAllAtExit() {
        Runtime.getRuntime().addShutdownHook(Thread.ofPlatform().name("ucx4j-children").unstarted(
                () -> ProcessHandle.current().descendants().forEach(ProcessHandle::destroyForcibly)));
    }

    /**
     * A benchmark's server process ends with the process that started it ({@code parentPid}, passed on its command
     * line), even one killed without a chance to clean up (SIGKILL, a crash): otherwise, before its client connects,
     * it would wait for it in vain. The moment a parent dies its children go to another (init, or a subreaper),
     * before anyone reaps it, so a parent other than {@code parentPid} (checked now and every 200 ms) means it died;
     * a JVM started after its parent died finds the new one at once.
     */
    static void exitWithParent(long parentPid) {
        Thread.ofPlatform().daemon().name("ucx4j-parent-watch").start(() -> {
            while (true) {
                java.util.Optional<ProcessHandle> parent = ProcessHandle.current().parent();
                // empty: its /proc entry could not be read, which says nothing unless the pid is gone as well
                if (parent.isPresent() ? parent.get().pid() != parentPid : ProcessHandle.of(parentPid).isEmpty()) {
                    Runtime.getRuntime().halt(4);
                }
                try {
                    Thread.sleep(200);
                } catch (InterruptedException e) {
                    return;
                }
            }
        });
    }

    /** util-linux's {@code setpriv}, where this system has one that sets a parent-death signal (2.33+), else null. */
    private static final String SETPRIV = Stream.of("/usr/bin/setpriv", "/bin/setpriv")
            .filter(f -> Files.isExecutable(Path.of(f)) && setsParentDeathSignal(f)).findFirst().orElse(null);

    /** Whether {@code setpriv} takes {@code --pdeathsig} (older ones exit with a usage error). */
    private static boolean setsParentDeathSignal(String setpriv) {
        try {
            Process p = new ProcessBuilder(setpriv, "--pdeathsig", "KILL", "--", "true")
                    .redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
            if (!p.waitFor(10, TimeUnit.SECONDS)) {
                p.destroyForcibly();
                return false;
            }
            return p.exitValue() == 0;
        } catch (IOException e) {
            return false;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return false;
        }
    }

    /**
     * {@code cmd}, to be started so that it is killed with this process even when this one is killed outright
     * (SIGKILL, a crash): a native child such as {@code ucx_perftest} cannot watch its parent as ucx4j's own
     * servers do ({@link #exitWithParent}), so where a {@code setpriv} that can is found it starts the command with a
     * parent-death signal. Linux sends it when the thread that started the process ends, so start such a command
     * from a thread that lives as long as it is needed (the command's own main thread). Elsewhere {@code cmd}
     * unchanged: the JVM's exit hook ({@link #killAllAtExit}) and the benchmarks' time limits remain.
     */
    static List<String> endingWithThisProcess(List<String> cmd) {
        if (SETPRIV == null) {
            return cmd;
        }
        List<String> bound = new ArrayList<>(List.of(SETPRIV, "--pdeathsig", "KILL", "--"));
        bound.addAll(cmd);
        return bound;
    }

    /**
     * The first line of {@code p}'s output that starts with {@code prefix}; null when {@code p} ends first or
     * nothing came within {@code limit} (then {@code p} is killed). Every other line of its output, before and
     * after that one, is copied to this process's stderr as it comes (UCX writes its warnings to stdout), so that
     * the child never blocks on a full pipe.
     */
    static String awaitLine(Process p, String prefix, Duration limit) throws InterruptedException {
        return awaitLine(p, prefix, limit, System.err);
    }

    /** {@link #awaitLine(Process, String, Duration)}, the child's other lines going to {@code others}. */
    static String awaitLine(Process p, String prefix, Duration limit, java.io.PrintStream others)
            throws InterruptedException {
        BufferedReader r = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8));
        CompletableFuture<String> line = new CompletableFuture<>();
        Thread.ofVirtual().name("ucx4j-child-output").start(() -> {
            try {
                String l;
                while ((l = r.readLine()) != null) {
                    if (!line.isDone() && l.startsWith(prefix)) {
                        line.complete(l);
                    } else {
                        others.println(l);
                    }
                }
                line.complete(null);
            } catch (IOException e) {
                line.completeExceptionally(new UncheckedIOException(e));
            }
        });
        try {
            return line.get(limit.toNanos(), TimeUnit.NANOSECONDS);
        } catch (TimeoutException e) {
            p.destroyForcibly();
            return null;
        } catch (ExecutionException e) {
            return null;
        }
    }
}
