package org.ucx4j.cli;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.Test;

/** The benchmarks' native children (ucx_perftest) end with the process that started them, however it ends. */
class ChildrenTest {

    /** A JVM that starts a long sleep the way the sweep starts ucx_perftest, prints its pid, and waits. */
    public static final class Starter {
        public static void main(String[] args) throws Exception {
            Process p = new ProcessBuilder(Children.endingWithThisProcess(List.of("sleep", "600")))
                    .redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
            System.out.println("CHILD " + p.pid());
            System.out.flush();
            Thread.sleep(600_000);
        }
    }

    @Test
    void aNativeChildDiesWithItsParentKilledOutright() throws Exception {
        assumeTrue(Files.isExecutable(Path.of("/usr/bin/setpriv")) || Files.isExecutable(Path.of("/bin/setpriv")),
                "util-linux setpriv not installed");
        Process starter = new ProcessBuilder(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "-cp", System.getProperty("java.class.path"), Starter.class.getName()).redirectErrorStream(true)
                .start();
        long child = -1;
        try {
            BufferedReader r = new BufferedReader(new InputStreamReader(starter.getInputStream(),
                    StandardCharsets.UTF_8));
            for (String l; (l = r.readLine()) != null; ) {
                if (l.startsWith("CHILD ")) {
                    child = Long.parseLong(l.substring(6).trim());
                    break;
                }
            }
            assertTrue(child > 0, "the starter printed no child");
            assertTrue(running(child), "the child runs while its parent does");
            starter.destroyForcibly(); // SIGKILL: no exit hook runs
            assertTrue(starter.waitFor(30, TimeUnit.SECONDS));
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (running(child) && System.nanoTime() < deadline) {
                Thread.sleep(20);
            }
            assertFalse(running(child), "the child outlived its parent, killed outright");
        } finally {
            starter.destroyForcibly();
            if (child > 0) {
                ProcessHandle.of(child).ifPresent(ProcessHandle::destroyForcibly);
            }
        }
    }

    @Test
    void withoutSetprivTheCommandIsUnchangedAndOtherwiseItIsPrefixed() {
        List<String> cmd = Children.endingWithThisProcess(List.of("ucx_perftest", "-t", "tag_lat"));
        assertNotNull(cmd);
        assertTrue(cmd.subList(cmd.size() - 3, cmd.size()).equals(List.of("ucx_perftest", "-t", "tag_lat")),
                cmd.toString());
        assertTrue(cmd.size() == 3 || cmd.subList(1, 4).equals(List.of("--pdeathsig", "KILL", "--")), cmd.toString());
    }

    /** Whether {@code pid} runs (a zombie, killed and not yet reaped, does not). */
    private static boolean running(long pid) {
        try {
            String stat = Files.readString(Path.of("/proc", Long.toString(pid), "stat"));
            char state = stat.charAt(stat.lastIndexOf(')') + 2);
            return state != 'Z' && state != 'X';
        } catch (java.io.IOException e) {
            return false;
        }
    }
}
