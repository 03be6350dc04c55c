package org.ucx4j.internal.engine;

import static java.lang.foreign.ValueLayout.JAVA_LONG;
import static org.ucx4j.internal.ffi.Structs.UCS_CONFIG_PRINT_CONFIG;
import static org.ucx4j.internal.ffi.Structs.UCS_CONFIG_PRINT_HIDDEN;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.Map;
import org.ucx4j.ConfigException;
import org.ucx4j.internal.ffi.Status;
import org.ucx4j.internal.ffi.Ucp;

/** UCX configuration: the options a context is created with, their effective values, same-host settings. */
public final class UcxConfig {
    private UcxConfig() {}

    /**
     * {@code ucp_config_read} plus the given options (keys with or without {@code UCX_}); an option whose
     * {@code UCX_} variable is set in the environment is skipped when {@code environmentWins}. Caller releases.
     */
    static long read(Map<String, String> options, boolean environmentWins) {
        return read(options, environmentWins, true);
    }

    /** {@link #read(Map, boolean)}; transport options go to the environment only with {@code apply} (an open). */
    private static long read(Map<String, String> options, boolean environmentWins, boolean apply) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment out = a.allocate(JAVA_LONG);
            Engine.check(Ucp.configRead(0, 0, out.address()), "ucp_config_read");
            long config = out.get(JAVA_LONG, 0);
            for (Map.Entry<String, String> e : options.entrySet()) {
                String key = stripPrefix(e.getKey());
                if (environmentWins && System.getenv("UCX_" + key) != null) {
                    continue;
                }
                if (readOnly(key)) {
                    Ucp.configRelease(config);
                    throw new ConfigException("UCX option " + key + " is read once, when UCX loads, and cannot be "
                            + "set per instance (UCX 1.20 refuses it, older versions ignore it): set UCX_" + key
                            + " in the environment before the JVM starts (" + Status.name(Status.ERR_INVALID_PARAM)
                            + ")", Status.ERR_INVALID_PARAM);
                }
                if (!UcpKeys.SET.contains(key) && !Ucp.isGlobalOption(key)) {
                    // a transport option (POSIX_FIFO_SIZE, TCP_...): UCX 1.13 accepts it in ucp_config_modify but
                    // never applies it ("invalid configuration"); its interfaces read it from the environment
                    if (!apply) {
                        continue; // a query (Ucx.config) leaves the process environment as it is
                    }
                    Ucp.setenv("UCX_" + key, e.getValue(), true);
                    if (key.equals("TCP_RX_SEG_SIZE") && !hasOption(options, "TCP_TX_SEG_SIZE")
                            && Ucp.defaultApplied("TCP_TX_SEG_SIZE")) {
                        // as when the environment sets the receive size: UCX's own send segment, not ucx4j's 64 KiB,
                        // which a smaller receive segment would make UCX refuse
                        Ucp.setenv("UCX_TCP_TX_SEG_SIZE", UCX_TCP_TX_SEG_SIZE, true);
                    }
                    continue;
                }
                int st = Ucp.configModify(config, a.allocateFrom(key).address(), a.allocateFrom(e.getValue()).address());
                if (st != Status.OK) {
                    Ucp.configRelease(config);
                    throw new ConfigException("UCX option " + key + "=" + e.getValue() + " refused: "
                            + Status.describe(st), st);
                }
            }
            return config;
        }
    }

    /** UCS's global options that it reads only when it loads ({@code ucs_global_opts_read_only_table}). */
    private static final java.util.Set<String> READ_ONLY = java.util.Set.of("LOG_FILE", "LOG_FILE_SIZE",
            "LOG_FILE_ROTATE", "ERROR_SIGNALS", "VFS_ENABLE", "VFS_SOCK_PATH", "VFS_THREAD_AFFINITY", "MEMTRACK_DEST",
            "RCACHE_STAT_MIN", "RCACHE_STAT_MAX");

    static boolean readOnly(String key) {
        return READ_ONLY.contains(key) || key.startsWith("STATS_") || key.startsWith("PROFILE_");
    }

    /** UCX's own TCP send segment size, which ucx4j's default replaces (see LibC.DEFAULTS). */
    private static final String UCX_TCP_TX_SEG_SIZE = "8K";

    private static boolean hasOption(Map<String, String> options, String key) {
        return options.keySet().stream().anyMatch(k -> stripPrefix(k).equals(key));
    }

    /** The effective UCX configuration ({@code UCX_KEY=value} lines) for these options. */
    public static String effective(Map<String, String> options, boolean environmentWins) {
        Ucp.ensureLoaded();
        long config = read(options, environmentWins, false);
        try (Arena a = Arena.ofConfined()) {
            MemorySegment title = a.allocateFrom("");
            return Ucp.capture(f -> Ucp.configPrint(config, f, title.address(), UCS_CONFIG_PRINT_CONFIG));
        } finally {
            Ucp.configRelease(config);
        }
    }

    /**
     * UCX's shared-memory transports size a peer's receive FIFO with the sender's own settings, so two processes
     * with different FIFO sizes corrupt each other's memory (and with different segment sizes, unless both worker
     * addresses are v2). These are the settings a same-host peer must share, as UCX will use them: each value as
     * UCX resolves it ({@link #resolve}: its own variable, the shared {@code UCX_MM_*} one, a {@code ucx.conf}, or
     * UCX's default: FIFOs of 64 slots up to UCX 1.15, 256 since 1.16, so two processes on different UCX versions
     * with no settings of their own differ too).
     */
    static String sharedMemorySettings() {
        String fifo = defaultFifo();
        Map<String, String> resolved = resolved(Ucp.printAllOptions());
        StringBuilder b = new StringBuilder();
        for (String transport : new String[] {"POSIX", "SYSV"}) {
            for (String[] k : new String[][] {{"FIFO_SIZE", fifo}, {"SEG_SIZE", "8256"}}) {
                String key = transport + "_" + k[0];
                b.append(b.isEmpty() ? "" : " ").append("UCX_").append(key).append('=')
                        .append(resolve(resolved, transport, k[0], k[1]));
            }
        }
        return b.toString();
    }

    /** UCX's own FIFO size: 64 slots up to UCX 1.15, 256 since 1.16. */
    private static String defaultFifo() {
        int[] version = Ucp.version();
        return version[0] > 1 || version[1] >= 16 ? "256" : "64";
    }

    /**
     * The larger of the posix and sysv receive FIFOs, in slots, as UCX will size them ({@link #resolve}); a value
     * that is not a number counts as large.
     */
    static long largestFifo() {
        Map<String, String> resolved = resolved(Ucp.printAllOptions());
        long largest = 0;
        for (String transport : new String[] {"POSIX", "SYSV"}) {
            String v = resolve(resolved, transport, "FIFO_SIZE", defaultFifo());
            try {
                largest = Math.max(largest, Long.parseLong(v.strip()));
            } catch (NumberFormatException e) {
                largest = Long.MAX_VALUE;
            }
        }
        return largest;
    }

    /**
     * A shared-memory transport's setting as UCX takes it: from UCX's own resolution when it printed one
     * ({@code resolved}), else as UCX reads it: {@code UCX_<TRANSPORT>_<KEY>}, then {@code UCX_MM_<KEY>} (the
     * table every shared-memory transport shares), then {@code fallback} (UCX's default).
     */
    static String resolve(Map<String, String> resolved, String transport, String key, String fallback) {
        String v = resolved.get("UCX_" + transport + "_" + key);
        if (v == null) {
            v = Ucp.getenv("UCX_" + transport + "_" + key);
        }
        if (v == null) {
            v = Ucp.getenv("UCX_MM_" + key);
        }
        return v == null ? fallback : v;
    }

    /**
     * Whether the rendezvous threshold of {@code config} is UCX's own choice ({@code UCX_RNDV_THRESH=auto}, or
     * {@code intra:auto,inter:auto} from UCX 1.16): not set by the application, its environment or a {@code ucx.conf}.
     */
    static boolean rendezvousLeftToUcx(long config) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment title = a.allocateFrom("");
            String v = resolved(Ucp.capture(f -> Ucp.configPrint(config, f, title.address(), UCS_CONFIG_PRINT_CONFIG)))
                    .get("UCX_RNDV_THRESH");
            return v != null && java.util.Arrays.stream(v.split(","))
                    .allMatch(part -> part.substring(part.indexOf(':') + 1).strip().equalsIgnoreCase("auto"));
        }
    }

    /** {@code UCX_KEY=value} lines (as {@link Ucp#printAllOptions()} gives them; null: none) as a map. */
    static Map<String, String> resolved(String lines) {
        Map<String, String> m = new java.util.HashMap<>();
        if (lines != null) {
            for (String line : lines.split("\n")) {
                int eq = line.indexOf('=');
                if (line.startsWith("UCX_") && eq > 4) {
                    m.putIfAbsent(line.substring(0, eq), line.substring(eq + 1).strip());
                }
            }
        }
        return m;
    }

    /** The options in UCP's own table, hidden ones included (what {@code ucp_config_print} can list). */
    private static final class UcpKeys {
        static final java.util.Set<String> SET = read();

        private static java.util.Set<String> read() {
            java.util.Set<String> keys = new java.util.HashSet<>();
            try (Arena a = Arena.ofConfined()) {
                MemorySegment out = a.allocate(JAVA_LONG);
                Engine.check(Ucp.configRead(0, 0, out.address()), "ucp_config_read");
                long config = out.get(JAVA_LONG, 0);
                MemorySegment title = a.allocateFrom("");
                String text;
                try {
                    text = Ucp.capture(f -> Ucp.configPrint(config, f, title.address(),
                            UCS_CONFIG_PRINT_CONFIG | UCS_CONFIG_PRINT_HIDDEN));
                } finally {
                    Ucp.configRelease(config);
                }
                for (String line : text.split("\n")) {
                    int eq = line.indexOf('=');
                    if (line.startsWith("UCX_") && eq > 4) {
                        keys.add(line.substring(4, eq));
                    }
                }
            }
            return keys;
        }
    }

    private static String stripPrefix(String key) {
        return key.startsWith("UCX_") ? key.substring(4) : key;
    }
}
