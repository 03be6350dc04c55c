package org.ucx4j.internal.ffi;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.invoke.MethodHandle;

/**
 * Process environment UCX must see before libucs loads: UCS reads its global options (error signals among them) in
 * its library constructor, so they are set with libc {@code setenv} first.
 */
final class LibC {
    private LibC() {}

    private static final int LC_NUMERIC = 1; // glibc

    /**
     * Defaults ucx4j gives UCX unless the environment sets them: shared memory keeps working on endpoints with
     * peer-failure detection ({@code POSIX_ERROR_HANDLING}; UCX 1.13 drops shm for them otherwise), and a dead
     * same-host peer is found within seconds ({@code KEEPALIVE_INTERVAL}, 20 s in UCX), and memory UCX allocates
     * for RMA comes from the posix transport first ({@code ALLOC_PRIO}: UCX's default list with {@code md:posix}
     * moved ahead of {@code md:sysv}, and, as in UCX 1.16 and later, no huge pages: a fallback onto the host's
     * reserved pool at 2 MiB or 1 GiB granularity), so same-host peers reach it through the posix lanes they keep with
     * peer-failure detection: a get is then a plain copy, not a ~5x slower emulation over active messages.
     * Shared-memory segments of 32 KiB ({@code *_SEG_SIZE}, UCX: 8 KiB): with peer-failure detection UCX has no
     * zero-copy lane between same-host processes, so large messages cross the receiver's FIFO in segments, and a
     * 4x larger segment more than doubles their bandwidth; receive buffers grow by 128 segments at a time (4 MiB of
     * {@code /dev/shm}, as UCX's 512 x 8 KiB). Worker addresses in UCX's format v2 ({@code ADDRESS_VERSION}), which
     * carries each transport's segment size, so a peer with smaller segments is sent fragments that fit them.
     * TCP send segments of 64 KiB ({@code TCP_TX_SEG_SIZE}, UCX: 8 KiB), as large as UCX's default receive
     * segment, so every peer with UCX's default receive size takes them: over TCP, large messages and rendezvous
     * went at ~0.4-1.2 GB/s here in 8 KiB pieces and at ~2-3.6 GB/s with 64 KiB ones, as fast as Java NIO. Not
     * applied where {@code UCX_TCP_RX_SEG_SIZE} is set (UCX refuses a send segment larger than the receive one),
     * nor a {@code POSIX_}/{@code SYSV_} default where the user set {@code UCX_MM_} for the same key (every
     * shared-memory transport's). These are environment variables, which UCX ranks above a {@code ucx.conf}.
     */
    static final java.util.Map<String, String> DEFAULTS = java.util.Map.of(
            "POSIX_ERROR_HANDLING", "y",
            "KEEPALIVE_INTERVAL", "1s",
            "ALLOC_PRIO", "md:posix,md:sysv,thp,md:*,mmap,heap",
            "POSIX_SEG_SIZE", "32832",
            "SYSV_SEG_SIZE", "32832",
            "POSIX_RX_BUFS_GROW", "128",
            "SYSV_RX_BUFS_GROW", "128",
            "ADDRESS_VERSION", "v2",
            "TCP_TX_SEG_SIZE", "64K");

    private static final int RTLD_LAZY = 1, RTLD_NOLOAD = 4; // Linux

    /** The defaults that were applied (the environment did not set them), by key without {@code UCX_}. */
    static final java.util.Set<String> APPLIED = java.util.concurrent.ConcurrentHashMap.newKeySet();

    /**
     * Whether libucs was in the process before ucx4j prepared the environment (another UCX user in this JVM: JUCX,
     * a RAPIDS shuffle): it read its load-time settings then, so {@code UCX_ERROR_SIGNALS} and these defaults did not
     * reach it, and UCX may have taken the JVM's signals.
     */
    static boolean ucsLoadedBefore;

    /**
     * The variable that sets a shared-memory transport's {@code key} (without {@code UCX_}) for all of them:
     * every such transport reads its table under {@code UCX_MM_} and then under its own name, which overrides it
     * ({@code UCX_POSIX_SEG_SIZE} over {@code UCX_MM_SEG_SIZE}); null for other keys.
     */
    static String sharedMemoryAlias(String key) {
        for (String transport : new String[] {"POSIX_", "SYSV_"}) {
            if (key.startsWith(transport)) {
                return "UCX_MM_" + key.substring(transport.length());
            }
        }
        return null;
    }

    static void prepareEnvironment(SymbolLookup libc) throws Throwable {
        var dlopen = libc.find("dlopen");
        if (dlopen.isPresent()) {
            MethodHandle open = NativeAccess.downcall(libc, "dlopen", FunctionDescriptor.of(ADDRESS, ADDRESS, JAVA_INT));
            try (Arena a = Arena.ofConfined()) {
                MemorySegment h = (MemorySegment) open.invokeExact(a.allocateFrom("libucs.so.0"),
                        RTLD_LAZY | RTLD_NOLOAD);
                if (h.address() != 0) {
                    ucsLoadedBefore = true;
                    MethodHandle close = NativeAccess.downcall(libc, "dlclose",
                            FunctionDescriptor.of(JAVA_INT, ADDRESS));
                    int ignored = (int) close.invokeExact(h); // NOLOAD took a reference
                }
            }
        }
        MethodHandle setenv = NativeAccess.downcall(libc, "setenv",
                FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, JAVA_INT));
        MethodHandle setlocale = NativeAccess.downcall(libc, "setlocale",
                FunctionDescriptor.of(ADDRESS, JAVA_INT, ADDRESS));
        try (Arena a = Arena.ofConfined()) {
            // HotSpot owns SIGSEGV/SIGBUS/SIGILL/SIGFPE; UCX must not install its handlers over them.
            int rc = (int) setenv.invokeExact(a.allocateFrom("UCX_ERROR_SIGNALS"), a.allocateFrom(""), 1);
            // and libucs's load-time debug signal (SIGHUP by default, 1.13 to 1.20) would replace the JVM's SIGHUP
            // handler, so a hang-up no longer ran shutdown hooks and ended the process but turned on UCX's packet
            // tracing; 0: none (a user's UCX_DEBUG_SIGNO wins)
            int rd = (int) setenv.invokeExact(a.allocateFrom("UCX_DEBUG_SIGNO"), a.allocateFrom("0"), 0);
            // ucx4j's defaults, as environment defaults so the user's UCX_* variables win (overwrite = 0). Transport
            // options (POSIX_*) must come from the environment: ucp_config_modify cannot reach UCT iface tables.
            MethodHandle getenv = NativeAccess.downcall(libc, "getenv", FunctionDescriptor.of(ADDRESS, ADDRESS));
            MemorySegment rxSeg = (MemorySegment) getenv.invokeExact(a.allocateFrom("UCX_TCP_RX_SEG_SIZE"));
            for (var e : DEFAULTS.entrySet()) {
                if (e.getKey().equals("TCP_TX_SEG_SIZE") && rxSeg.address() != 0) {
                    continue; // the user sized TCP receive segments: UCX's send segment (8 KiB) stays
                }
                String shared = sharedMemoryAlias(e.getKey());
                if (shared != null && ((MemorySegment) getenv.invokeExact(a.allocateFrom(shared))).address() != 0) {
                    continue; // the user set it for every shared-memory transport: UCX's own lookup takes that
                }
                MemorySegment was = (MemorySegment) getenv.invokeExact(a.allocateFrom("UCX_" + e.getKey()));
                if (was.address() == 0) {
                    APPLIED.add(e.getKey());
                }
                int r = (int) setenv.invokeExact(a.allocateFrom("UCX_" + e.getKey()), a.allocateFrom(e.getValue()), 0);
                if (r != 0) {
                    throw new IllegalStateException("setenv UCX_" + e.getKey() + " failed");
                }
            }
            // UCX's config parser reads numbers with strtod: force the C numeric locale.
            MemorySegment prev = (MemorySegment) setlocale.invokeExact(LC_NUMERIC, a.allocateFrom("C"));
            if (rc != 0 || rd != 0 || prev.address() == 0) {
                throw new IllegalStateException("could not prepare the process environment for UCX");
            }
        }
    }
}
