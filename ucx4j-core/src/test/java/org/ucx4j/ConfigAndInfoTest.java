package org.ucx4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/** UCX-Py's test_config / test_info: version, effective configuration with options, info text. */
class ConfigAndInfoTest {
    @Test
    void versionIsAtLeastTheMinimum() {
        String[] v = Ucx.version().split("\\.");
        assertEquals(3, v.length, Ucx.version());
        int major = Integer.parseInt(v[0]), minor = Integer.parseInt(v[1]);
        assertTrue(major > 1 || (major == 1 && minor >= 13), Ucx.version());
        assertNotNull(Ucx.libraryLocation());
    }

    @Test
    void optionsShowInTheEffectiveConfigWithOrWithoutPrefix() {
        Map<String, String> defaults = Ucx.config(UcxOptions.defaults());
        assertTrue(defaults.containsKey("TLS") && defaults.containsKey("RNDV_THRESH"), defaults.keySet().toString());
        UcxOptions o = UcxOptions.defaults().with("UCX_RNDV_THRESH", "12345").with("RNDV_THRESH_FALLBACK", "4K");
        Map<String, String> c = Ucx.config(o);
        assertSize("12345", c.get("RNDV_THRESH"));
        assertEquals("4K", c.get("RNDV_THRESH_FALLBACK"));
        try (Ucx ucx = Ucx.open(o)) {
            assertSize("12345", ucx.config().get("RNDV_THRESH")); // an open instance reports its own options
        }
    }

    /**
     * Without peer error handling UCX would name endpoints on the wire by raw pointers, which it does not check: ucx4j
     * asks for its checked ids, as error handling has them, unless the user chose otherwise.
     */
    @Test
    void withoutPeerErrorHandlingUcxChecksTheEndpointIdsItIsSent() {
        assertEquals("auto", Ucx.config(UcxOptions.defaults()).get("PROTO_INDIRECT_ID"));
        UcxOptions off = UcxOptions.defaults().withPeerErrorHandling(false);
        assertEquals("on", Ucx.config(off).get("PROTO_INDIRECT_ID"));
        assertEquals("off", Ucx.config(off.with("PROTO_INDIRECT_ID", "off")).get("PROTO_INDIRECT_ID"));
        try (Ucx ucx = Ucx.open(off)) {
            assertEquals("on", ucx.config().get("PROTO_INDIRECT_ID"));
        }
    }

    /** An option set both in the environment and in the options: the options win unless the environment is asked to. */
    @Test
    void theEnvironmentWinsOnlyWhenAskedTo() throws Exception {
        Map<String, String> env = Map.of("UCX_RNDV_THRESH", "23456");
        try (Peer p = Peer.start(env, List.of(), "effective-option", "RNDV_THRESH", "12345", "false")) {
            assertSize("12345", p.await("EFFECTIVE"));
        }
        try (Peer p = Peer.start(env, List.of(), "effective-option", "RNDV_THRESH", "12345", "true")) {
            assertSize("23456", p.await("EFFECTIVE"));
        }
    }

    /** A size option as UCX prints it: {@code 12345} (1.13), or per scope, {@code intra:12345,inter:12345} (1.20). */
    private static void assertSize(String expected, String printed) {
        assertNotNull(printed);
        for (String part : printed.split(",")) {
            assertEquals(expected, part.replaceFirst("^[a-z]+:", ""), printed);
        }
    }

    /** UCX < 1.16's experimental protocols abort the process when a peer fails: refused at open, with the reason. */
    @Test
    void experimentalProtocolsOfUcxBefore116AreRefused() {
        UcxOptions v2 = UcxOptions.defaults().with("PROTO_ENABLE", "y");
        if (Integer.parseInt(Ucx.version().split("\\.")[1]) < 16) {
            ConfigException e = assertThrows(ConfigException.class, () -> Ucx.open(v2));
            assertTrue(e.getMessage().contains("UCX_PROTO_ENABLE=y") && e.getMessage().contains("1.16")
                    && e.getMessage().contains("UCS_ERR_UNSUPPORTED"), e.getMessage());
        } else {
            try (Ucx ucx = Ucx.open(v2)) { // UCX's own default from 1.16
                assertEquals("y", ucx.config().get("PROTO_ENABLE"));
            }
        }
        try (Ucx ucx = Ucx.open(UcxOptions.defaults().with("PROTO_ENABLE", "n"))) {
            assertEquals("n", ucx.config().get("PROTO_ENABLE"));
        }
    }

    @Test
    void aRefusedOptionIsAConfigErrorNamingIt() {
        UcxOptions bad = UcxOptions.defaults().with("RNDV_THRESH", "not-a-size");
        ConfigException e = assertThrows(ConfigException.class, () -> Ucx.config(bad));
        // a query sets no transport option in the process environment (an open would, for UCX to apply it)
        String before = org.ucx4j.internal.ffi.Ucp.getenv("UCX_POSIX_FIFO_SIZE");
        Ucx.config(UcxOptions.defaults().with("POSIX_FIFO_SIZE", "32"));
        assertEquals(before, org.ucx4j.internal.ffi.Ucp.getenv("UCX_POSIX_FIFO_SIZE"));
        assertTrue(e.getMessage().contains("RNDV_THRESH") && e.getMessage().contains("UCS_ERR"), e.getMessage());
        assertThrows(ConfigException.class, () -> Ucx.open(bad));
        assertThrows(IllegalArgumentException.class, () -> UcxOptions.defaults().with(" ", "x"));
    }

    /**
     * Options UCX reads only when it loads (log file, error signals, statistics...) cannot be set per instance: UCX
     * 1.20 refuses them and older versions ignore them, so every version refuses them here, naming the remedy.
     */
    @Test
    void anOptionReadOnlyAtLoadIsRefusedWithTheRemedy() {
        for (String key : List.of("LOG_FILE", "UCX_ERROR_SIGNALS", "STATS_DEST", "VFS_SOCK_PATH")) {
            UcxOptions o = UcxOptions.defaults().with(key, "x");
            ConfigException e = assertThrows(ConfigException.class, () -> Ucx.open(o), key);
            assertTrue(e.getMessage().contains("in the environment before the JVM starts")
                    && e.getMessage().contains("UCS_ERR_INVALID_PARAM"), e.getMessage());
            assertThrows(ConfigException.class, () -> Ucx.config(o));
        }
    }

    /** A configuration UCX parses but cannot start with (no transport left) is a ConfigException from ucp_init. */
    @Test
    void aConfigurationUcxCannotStartWithIsAConfigError() {
        for (String tls : new String[] {"", "no_such_transport"}) {
            ConfigException e = assertThrows(ConfigException.class,
                    () -> Ucx.open(UcxOptions.defaults().with("TLS", tls)).close(), "TLS='" + tls + "'");
            assertTrue(e.getMessage().startsWith("ucp_init: UCS_ERR_") && e.getMessage().contains("configuration"),
                    e.getMessage());
        }
        try (Ucx ok = Ucx.open()) { // nothing left behind
            assertFalse(ok.transports().isEmpty());
        }
    }

    @Test
    void livenessTimeoutIsWholeSecondsFromTwoToADay() {
        assertEquals(java.time.Duration.ofSeconds(5), UcxOptions.defaults().livenessTimeout());
        assertEquals(java.time.Duration.ofSeconds(2),
                UcxOptions.defaults().withLivenessTimeout(java.time.Duration.ofSeconds(2)).livenessTimeout());
        for (java.time.Duration bad : List.of(java.time.Duration.ofSeconds(1), java.time.Duration.ofMillis(2500),
                java.time.Duration.ofDays(2), java.time.Duration.ZERO, java.time.Duration.ofSeconds(-3))) {
            assertThrows(IllegalArgumentException.class, () -> UcxOptions.defaults().withLivenessTimeout(bad),
                    bad.toString());
        }
        assertThrows(NullPointerException.class, () -> UcxOptions.defaults().withLivenessTimeout(null));
    }

    @Test
    void transportOptionsGoToTheEnvironmentUcxReadsThemFrom() throws Throwable {
        // POSIX_FIFO_MAX_POLL is no UCP option: UCX 1.13 takes it in ucp_config_modify but never applies it; the
        // process environment, which its interfaces read when they open, does. (A receiver-side knob: the shm
        // FIFO size itself must match in every process, so a test JVM must not change it for later tests.)
        try (Ucx ucx = Ucx.open(UcxOptions.defaults().with("UCX_POSIX_FIFO_MAX_POLL", "32"))) {
            assertEquals("32", nativeGetenv("UCX_POSIX_FIFO_MAX_POLL"));
            assertTrue(ucx.workerAddress().toBytes().length > 0);
        }
        // UCP options still go to the configuration, not the environment
        try (Ucx ucx = Ucx.open(UcxOptions.defaults().with("RNDV_THRESH", "54321"))) {
            assertSize("54321", ucx.config().get("RNDV_THRESH"));
            assertEquals(null, nativeGetenv("UCX_RNDV_THRESH"));
        }
    }

    @Test
    void sameHostPeersWithDifferentSharedMemoryFifosOrSegmentsAreRefusedNotCorrupted() throws Throwable {
        org.junit.jupiter.api.Assumptions.assumeTrue(startupEnv("UCX_TLS") == null, "shared memory must be in use");
        // UCX sizes a peer's shm FIFO with the sender's own setting: unequal sizes would write past the smaller one
        String was = nativeGetenv("UCX_POSIX_FIFO_SIZE"); // null unless this JVM's environment sets it
        // UCX's own default: 64 slots up to 1.15, 256 since 1.16 (so peers on the two sides of that differ too)
        String fifo = was != null ? was : Integer.parseInt(Ucx.version().split("\\.")[1]) >= 16 ? "256" : "64";
        String otherFifo = "128".equals(fifo) ? "512" : "128";
        try (Ucx small = Ucx.open(); Listener l = small.listen(0, ep -> { })) {
            try (Ucx big = Ucx.open(UcxOptions.defaults().with("POSIX_FIFO_SIZE", otherFifo))) {
                UcxException e = assertThrows(UcxException.class, () -> big.connect("127.0.0.1", l.port()));
                assertTrue(e.getMessage().contains("UCX_POSIX_FIFO_SIZE=" + otherFifo)
                        && e.getMessage().contains("UCX_POSIX_FIFO_SIZE=" + fifo)
                        && e.getMessage().contains("UCS_ERR_UNSUPPORTED"), e.getMessage());
            } finally {
                // the environment is the process's: give later tests (and the peers they start) what they had
                if (was == null) {
                    nativeUnsetenv("UCX_POSIX_FIFO_SIZE");
                } else {
                    Ucx.open(UcxOptions.defaults().with("POSIX_FIFO_SIZE", was)).close();
                }
            }
            assertEquals(was, nativeGetenv("UCX_POSIX_FIFO_SIZE"));
            try (Ucx same = Ucx.open(); Endpoint ep = same.connect("127.0.0.1", l.port())) {
                assertTrue(ep.isAlive(), "equal settings connect");
            }
            // a sender's shm segments must fit the receiver's buffers
            String ours = nativeGetenv("UCX_POSIX_SEG_SIZE");
            String other = "8256".equals(ours) ? "16448" : "8256";
            try (Ucx differs = Ucx.open(UcxOptions.defaults().with("POSIX_SEG_SIZE", other))) {
                UcxException e = assertThrows(UcxException.class, () -> differs.connect("127.0.0.1", l.port()));
                assertTrue(e.getMessage().contains("UCX_POSIX_SEG_SIZE=" + other)
                        && e.getMessage().contains("UCX_POSIX_SEG_SIZE=" + ours), e.getMessage());
            } finally {
                Ucx.open(UcxOptions.defaults().with("POSIX_SEG_SIZE", ours)).close();
            }
        }
    }

    /**
     * Every shared-memory transport also reads its settings under {@code UCX_MM_} (its own name overrides that): a
     * peer whose FIFO is sized that way is compared by the size UCX really uses (it was compared by UCX's default,
     * and accepted, to corrupt its peer's memory), and a segment size set that way is not overridden by ucx4j's
     * {@code POSIX_SEG_SIZE} default.
     */
    @Test
    void sharedMemorySettingsGivenForEveryTransportAreTheOnesCompared() throws Throwable {
        org.junit.jupiter.api.Assumptions.assumeTrue(startupEnv("UCX_TLS") == null, "shared memory must be in use");
        String fifo = nativeGetenv("UCX_POSIX_FIFO_SIZE") != null ? nativeGetenv("UCX_POSIX_FIFO_SIZE")
                : Integer.parseInt(Ucx.version().split("\\.")[1]) >= 16 ? "256" : "64";
        String otherFifo = "128".equals(fifo) ? "512" : "128";
        String seg = nativeGetenv("UCX_POSIX_SEG_SIZE");
        String otherSeg = "16448".equals(seg) ? "24640" : "16448";
        Map<String, String> fifoEnv = new java.util.HashMap<>();
        fifoEnv.put("UCX_MM_FIFO_SIZE", otherFifo);
        fifoEnv.put("UCX_POSIX_FIFO_SIZE", null);
        fifoEnv.put("UCX_SYSV_FIFO_SIZE", null);
        Map<String, String> segEnv = new java.util.HashMap<>();
        segEnv.put("UCX_MM_SEG_SIZE", otherSeg);
        segEnv.put("UCX_POSIX_SEG_SIZE", null);
        segEnv.put("UCX_SYSV_SEG_SIZE", null);
        for (Object[] c : new Object[][] {{fifoEnv, "UCX_POSIX_FIFO_SIZE=", otherFifo, fifo},
            {segEnv, "UCX_POSIX_SEG_SIZE=", otherSeg, seg}}) {
            @SuppressWarnings("unchecked")
            Map<String, String> env = (Map<String, String>) c[0];
            try (Peer p = Peer.start(env, List.of(), "serve-echo"); Ucx ucx = Ucx.open()) {
                int port = Integer.parseInt(p.await("PORT "));
                UcxException e = assertThrows(UcxException.class, () -> ucx.connect("127.0.0.1", port));
                String theirs = c[1] + (String) c[2], ours = c[1] + (String) c[3];
                assertTrue(e.getMessage().contains(theirs) && e.getMessage().contains(ours), env + ": " + e.getMessage());
            }
        }
        // with the same sizes given that way, a peer connects (and ucx4j's default did not replace the segment size)
        Map<String, String> sameEnv = new java.util.HashMap<>();
        sameEnv.put("UCX_MM_SEG_SIZE", seg);
        sameEnv.put("UCX_POSIX_SEG_SIZE", null);
        sameEnv.put("UCX_SYSV_SEG_SIZE", null);
        try (Peer p = Peer.start(sameEnv, List.of(), "serve-echo"); Ucx ucx = Ucx.open();
                Endpoint ep = ucx.connect("127.0.0.1", Integer.parseInt(p.await("PORT ")))) {
            assertTrue(ep.isAlive());
        }
        try (Peer p = Peer.start(sameEnv, List.of(), "environment-defaults")) {
            String defaults = p.await("DEFAULTS ");
            assertTrue(!defaults.contains("UCX_POSIX_SEG_SIZE") && !defaults.contains("UCX_SYSV_SEG_SIZE"), defaults);
            assertNotNull(p.await("ECHOED "));
        }
    }

    /** Without a shared-memory transport on one side, UCX cannot use one between them: the settings do not matter. */
    @Test
    void differentSharedMemorySettingsDoNotMatterWhenOneSideHasNoSharedMemory() throws Throwable {
        String was = nativeGetenv("UCX_POSIX_FIFO_SIZE");
        try (Ucx shm = Ucx.open(); Listener l = shm.listen(0, ep -> { })) {
            try (Ucx tcp = Ucx.open(UcxOptions.defaults().with("TLS", "tcp").with("POSIX_FIFO_SIZE", "1024"));
                    Endpoint ep = tcp.connect("127.0.0.1", l.port(), Duration.ofSeconds(10))) {
                assertTrue(ep.isAlive());
                assertTrue(ep.transports().stream().allMatch(t -> t.startsWith("tcp/")), ep.transports().toString());
            }
        } finally {
            if (was == null) {
                nativeUnsetenv("UCX_POSIX_FIFO_SIZE");
            } else {
                Ucx.open(UcxOptions.defaults().with("POSIX_FIFO_SIZE", was)).close();
            }
        }
    }

    @Test
    void environmentDefaultsAreWhatUcxSees() throws Throwable {
        Map<String, String> d = Ucx.environmentDefaults();
        for (String key : new String[] {"UCX_POSIX_ERROR_HANDLING", "UCX_POSIX_SEG_SIZE", "UCX_ADDRESS_VERSION",
            "UCX_ALLOC_PRIO", "UCX_TCP_TX_SEG_SIZE"}) {
            assertEquals(nativeGetenv(key), d.get(key), key);
        }
        if (startupEnv("UCX_POSIX_SEG_SIZE") == null && startupEnv("UCX_ADDRESS_VERSION") == null) {
            assertEquals("32832", d.get("UCX_POSIX_SEG_SIZE"));
            assertEquals("v2", d.get("UCX_ADDRESS_VERSION"));
        }
        if (startupEnv("UCX_TCP_TX_SEG_SIZE") == null && startupEnv("UCX_TCP_RX_SEG_SIZE") == null) {
            assertEquals("64K", d.get("UCX_TCP_TX_SEG_SIZE"));
        }
        assertThrows(UnsupportedOperationException.class, () -> d.put("UCX_TLS", "tcp"));
    }

    @Test
    void tcpSendSegmentsKeepToAReceiveSizeTheUserChose() throws Exception {
        // ucx4j's 64 KiB TCP send segments would exceed a smaller receive segment, which UCX refuses: with
        // UCX_TCP_RX_SEG_SIZE set, UCX's own send size stays, and TCP works
        Map<String, String> env = new java.util.HashMap<>(Map.of("UCX_TLS", "tcp", "UCX_TCP_RX_SEG_SIZE", "32K"));
        env.put("UCX_TCP_TX_SEG_SIZE", null); // as a process started by the user sees it, not this one's child
        try (Peer p = Peer.start(env, List.of(), "environment-defaults")) {
            String defaults = p.await("DEFAULTS ");
            assertTrue(!defaults.contains("UCX_TCP_TX_SEG_SIZE") && defaults.contains("UCX_POSIX_SEG_SIZE"), defaults);
            assertTrue(p.await("ECHOED ").contains("tcp/"));
        }
        env.put("UCX_TCP_RX_SEG_SIZE", null);
        // the same receive size as a UcxOptions transport option (set in the environment when the Ucx opens)
        try (Peer p = Peer.start(env, List.of(), "environment-defaults", "TCP_RX_SEG_SIZE", "32K")) {
            assertTrue(p.await("DEFAULTS ").contains("UCX_TCP_TX_SEG_SIZE=8K"));
            assertTrue(p.await("ECHOED ").contains("tcp/"));
        }
        try (Peer p = Peer.start(env, List.of(), "environment-defaults")) {
            assertTrue(p.await("DEFAULTS ").contains("UCX_TCP_TX_SEG_SIZE=64K"));
            assertTrue(p.await("ECHOED ").contains("tcp/"));
        }
    }

    /**
     * A variable as the process was started with it (Linux {@code /proc/self/environ}), unlike {@link System#getenv},
     * whose copy is taken on first use, possibly after ucx4j has set its defaults.
     */
    static String startupEnv(String name) throws java.io.IOException {
        byte[] all = java.nio.file.Files.readAllBytes(java.nio.file.Path.of("/proc/self/environ"));
        for (String kv : new String(all, java.nio.charset.StandardCharsets.UTF_8).split("\0")) {
            if (kv.startsWith(name + "=")) {
                return kv.substring(name.length() + 1);
            }
        }
        return null;
    }

    /** getenv as UCX sees it (System.getenv is a copy taken at JVM start). */
    static String nativeGetenv(String name) throws Throwable {
        java.lang.foreign.Linker linker = java.lang.foreign.Linker.nativeLinker();
        java.lang.invoke.MethodHandle getenv = linker.downcallHandle(linker.defaultLookup().find("getenv").orElseThrow(),
                java.lang.foreign.FunctionDescriptor.of(java.lang.foreign.ValueLayout.ADDRESS,
                        java.lang.foreign.ValueLayout.ADDRESS));
        try (java.lang.foreign.Arena a = java.lang.foreign.Arena.ofConfined()) {
            java.lang.foreign.MemorySegment v = (java.lang.foreign.MemorySegment) getenv.invokeExact(
                    a.allocateFrom(name));
            return v.address() == 0 ? null : v.reinterpret(Long.MAX_VALUE).getString(0);
        }
    }

    /** unsetenv in the process environment UCX reads. */
    static void nativeUnsetenv(String name) throws Throwable {
        java.lang.foreign.Linker linker = java.lang.foreign.Linker.nativeLinker();
        java.lang.invoke.MethodHandle unsetenv = linker.downcallHandle(
                linker.defaultLookup().find("unsetenv").orElseThrow(), java.lang.foreign.FunctionDescriptor.of(
                        java.lang.foreign.ValueLayout.JAVA_INT, java.lang.foreign.ValueLayout.ADDRESS));
        try (java.lang.foreign.Arena a = java.lang.foreign.Arena.ofConfined()) {
            assertEquals(0, (int) unsetenv.invokeExact(a.allocateFrom(name)));
        }
    }

    @Test
    void infoDescribesContextAndWorker() {
        try (Ucx ucx = Ucx.open()) {
            String info = ucx.info();
            assertTrue(info.contains("ucp_context") || info.contains("UCP context"), info);
            assertTrue(info.contains("worker"), info);
            assertTrue(info.contains("posix") || info.contains("tcp") || info.contains("sysv"),
                    "lists transports: " + info);
        }
    }

    /**
     * The memory types UCX reports for the context: host memory always, a GPU's exactly where UCX opened that GPU's
     * transports (on a host-only machine: host alone, and every operation then names its buffers host memory).
     */
    @Test
    void memoryTypesAreHostAndTheGpusWhoseTransportsUcxOpened() {
        try (Ucx ucx = Ucx.open()) {
            java.util.Set<MemoryType> types = ucx.memoryTypes();
            assertTrue(types.contains(MemoryType.HOST), types.toString());
            List<String> transports = ucx.transports();
            assertEquals(transports.stream().anyMatch(t -> t.startsWith("cuda")), types.contains(MemoryType.CUDA),
                    types + " against " + transports);
            assertEquals(transports.stream().anyMatch(t -> t.startsWith("rocm")), types.contains(MemoryType.ROCM),
                    types + " against " + transports);
            assertThrows(UnsupportedOperationException.class, () -> types.add(MemoryType.CUDA));
        }
        // the host-memory promise spares UCX its lookups; it does not change what UCX reports it can move
        try (Ucx promised = Ucx.open(UcxOptions.defaults().withHostMemoryOnly(true))) {
            assertTrue(promised.options().hostMemoryOnly());
            assertTrue(promised.memoryTypes().contains(MemoryType.HOST));
        }
    }

    /** The context's resources and an endpoint's lanes, as {@code transport/device}; lanes are among the resources. */
    @Test
    void transportsNameTheOpenedResourcesAndEachEndpointsLanes() throws Exception {
        try (Ucx a = Ucx.open(); Ucx b = Ucx.open()) {
            List<String> opened = a.transports();
            assertFalse(opened.isEmpty(), a.info());
            for (String t : opened) {
                assertTrue(t.matches("[a-z0-9_]+/\\S+"), "transport/device: " + t);
            }
            if (startupEnv("UCX_TLS") == null) { // UCX's default transports
                assertTrue(opened.stream().anyMatch(t -> t.startsWith("self/")), "UCX opens self: " + opened);
                assertTrue(opened.stream().anyMatch(t -> t.startsWith("tcp/")), "and tcp: " + opened);
            }
            CompletableFuture<Endpoint> accepted = new CompletableFuture<>();
            try (Listener l = b.listen("127.0.0.1", 0, accepted::complete);
                    Endpoint ep = a.connect("127.0.0.1", l.port(), Duration.ofSeconds(10))) {
                Endpoint server = accepted.get(10, TimeUnit.SECONDS);
                List<String> lanes = ep.transports();
                assertFalse(lanes.isEmpty(), ep.info());
                assertTrue(opened.containsAll(lanes), lanes + " not among " + opened);
                ep.close();
                assertEquals(List.of(), ep.transports(), "a closed endpoint has no lanes");
                server.abort();
            }
        }
    }
}
