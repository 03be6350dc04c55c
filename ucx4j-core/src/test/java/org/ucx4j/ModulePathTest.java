package org.ucx4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.ucx4j.modulecheck.ModuleProbe;

/**
 * ucx4j as a named module ({@code org.ucx4j}) on the module path, used by an application on the class path: only
 * {@code org.ucx4j} is exported (the native layer is not reachable, not even by reflection), native access is granted
 * to the module by name, and messaging and flight recording work from there. The tests themselves run on the class
 * path, so a second JVM is started the way a modular application would be.
 */
class ModulePathTest {
    private static String location(Class<?> c) throws Exception {
        return Path.of(c.getProtectionDomain().getCodeSource().getLocation().toURI()).toString();
    }

    /** Runs {@link ModuleProbe} with ucx4j on the module path, or with {@code modular} false on the class path. */
    private static Map<String, String> probe(Path dir, boolean modular, String... jvmFlags) throws Exception {
        List<String> cmd = new ArrayList<>();
        cmd.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        cmd.addAll(List.of(jvmFlags));
        String home = System.getProperty("ucx4j.ucx.home"); // a UCX chosen for the tests (the variable is inherited)
        if (home != null) {
            cmd.add("-Ducx4j.ucx.home=" + home);
        }
        String ucx4j = location(Ucx.class) + File.pathSeparator + location(org.slf4j.Logger.class);
        if (modular) {
            cmd.addAll(List.of("--module-path", ucx4j, "--add-modules", "org.ucx4j",
                    "-cp", location(ModuleProbe.class)));
        } else {
            cmd.addAll(List.of("-cp", ucx4j + File.pathSeparator + location(ModuleProbe.class)));
        }
        cmd.addAll(List.of(ModuleProbe.class.getName(), dir.resolve("probe.jfr").toString()));
        Path err = dir.resolve("stderr.txt");
        Path stdout = dir.resolve("stdout.txt");
        Process p = new ProcessBuilder(cmd).redirectError(err.toFile()).redirectOutput(stdout.toFile()).start();
        try {
            assertTrue(p.waitFor(60, TimeUnit.SECONDS), "probe did not exit");
        } finally {
            p.destroyForcibly();
        }
        String out = Files.readString(stdout, StandardCharsets.UTF_8);
        String stderr = Files.readString(err);
        assertEquals(0, p.exitValue(), out + stderr);
        Map<String, String> lines = new HashMap<>();
        for (String line : out.split("\n")) {
            int eq = line.indexOf('=');
            if (eq > 0) {
                lines.put(line.substring(0, eq), line.substring(eq + 1));
            }
        }
        lines.put("stderr", stderr);
        return lines;
    }

    @Test
    void onlyThePublicApiIsExportedAndItWorksFromTheModulePath(@TempDir Path dir) throws Exception {
        Map<String, String> r = probe(dir, true, "--enable-native-access=org.ucx4j");
        assertEquals("org.ucx4j", r.get("module"), r.toString());
        assertEquals("org.ucx4j", r.get("exported"), "the one exported package");
        assertTrue(List.of(r.get("hidden").split(",")).containsAll(
                List.of("org.ucx4j.internal.engine", "org.ucx4j.internal.ffi")), r.get("hidden"));
        assertEquals("refused", r.get("internal"), "reflection into the native layer");
        assertFalse(r.get("stderr").contains("restricted method"), r.get("stderr"));
        if (Ucx.isAvailable()) {
            assertEquals("none", r.get("cause"));
            String echo = r.get("echo");
            assertTrue(echo != null && echo.startsWith("ok transfers="), r.toString());
            assertTrue(Integer.parseInt(echo.substring("ok transfers=".length())) >= 2, "send and receive recorded");
        }
    }

    @Test
    void deniedNativeAccessNamesTheModuleInTheRemedy(@TempDir Path dir) throws Exception {
        Map<String, String> r = probe(dir, true, "--illegal-native-access=deny");
        assertTrue(r.get("cause").contains("--enable-native-access=org.ucx4j"), r.get("cause"));
        assertFalse(r.containsKey("echo"), "nothing runs without native access");
    }

    @Test
    void deniedNativeAccessOnTheClassPathNamesAllUnnamed(@TempDir Path dir) throws Exception {
        Map<String, String> r = probe(dir, false, "--illegal-native-access=deny");
        assertEquals("", r.get("module"), "the unnamed module");
        assertTrue(r.get("cause").contains("--enable-native-access=ALL-UNNAMED"), r.get("cause"));
        assertFalse(r.containsKey("echo"), "nothing runs without native access");
    }
}
