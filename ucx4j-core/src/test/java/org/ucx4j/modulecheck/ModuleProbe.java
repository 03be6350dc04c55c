package org.ucx4j.modulecheck;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.TreeSet;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import jdk.jfr.Recording;
import jdk.jfr.consumer.RecordingFile;
import org.ucx4j.Endpoint;
import org.ucx4j.Listener;
import org.ucx4j.Ucx;

/**
 * An application in the unnamed module using ucx4j from the module path ({@code ModulePathTest} starts it):
 * prints what the module exports, whether its internals can be reached, and, where UCX is usable, sends 1 MiB
 * between two workers under a flight recording. One {@code key=value} line each; the test judges them.
 */
public final class ModuleProbe {
    private ModuleProbe() {}

    public static void main(String[] args) throws Exception {
        Module m = Ucx.class.getModule();
        System.out.println("module=" + (m.isNamed() ? m.getName() : ""));
        TreeSet<String> exported = new TreeSet<>();
        TreeSet<String> hidden = new TreeSet<>();
        for (String p : m.getPackages()) {
            (m.isExported(p) ? exported : hidden).add(p);
        }
        System.out.println("exported=" + String.join(",", exported));
        System.out.println("hidden=" + String.join(",", hidden));
        try {
            Class<?> c = Class.forName("org.ucx4j.internal.ffi.NativeAccess");
            c.getMethod("nativeAccessEnabled").invoke(null);
            System.out.println("internal=reachable");
        } catch (IllegalAccessException e) {
            System.out.println("internal=refused");
        }
        String cause = Ucx.unavailabilityCause();
        System.out.println("cause=" + (cause == null ? "none" : cause));
        if (cause == null) {
            System.out.println("echo=" + echo(args.length > 0 ? Path.of(args[0]) : null));
        }
    }

    /** 1 MiB from one worker to another over a listener, bytes checked; counts ucx4j's JFR transfer events. */
    private static String echo(Path jfr) throws Exception {
        int size = 1 << 20;
        try (Recording rec = new Recording(); Arena arena = Arena.ofShared()) {
            rec.enable("org.ucx4j.Transfer");
            rec.start();
            try (Ucx a = Ucx.open(); Ucx b = Ucx.open()) {
                CompletableFuture<Endpoint> accepted = new CompletableFuture<>();
                try (Listener l = b.listen("127.0.0.1", 0, accepted::complete);
                     Endpoint client = a.connect("127.0.0.1", l.port());
                     Endpoint server = accepted.get(10, TimeUnit.SECONDS)) {
                    MemorySegment out = arena.allocate(size);
                    for (int i = 0; i < size; i++) {
                        out.set(ValueLayout.JAVA_BYTE, i, (byte) (i * 31 + 7));
                    }
                    MemorySegment in = arena.allocate(size);
                    CompletableFuture<Long> r = server.recvAsync(in, 5);
                    client.send(out, 5, Duration.ofSeconds(10));
                    long n = r.get(10, TimeUnit.SECONDS);
                    if (n != size || in.mismatch(out) != -1) {
                        return "corrupt(" + n + " bytes, first difference at " + in.mismatch(out) + ")";
                    }
                }
            }
            rec.stop();
            if (jfr == null) {
                return "ok";
            }
            rec.dump(jfr);
        }
        long events = RecordingFile.readAllEvents(jfr).stream()
                .filter(e -> e.getEventType().getName().equals("org.ucx4j.Transfer")).count();
        Files.deleteIfExists(jfr);
        return "ok transfers=" + events;
    }
}
