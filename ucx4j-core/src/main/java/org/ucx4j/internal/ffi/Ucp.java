package org.ucx4j.internal.ffi;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.invoke.MethodHandle;

/**
 * Downcalls into libucp/libucs (and the few libc calls UCX needs around it). Pointers cross as {@code long}
 * (LP64), so the hot path wraps nothing. Loading is lazy: the first use runs {@link #ensureLoaded()}, and
 * {@link #loadFailure()} tells why UCX is unusable.
 */
public final class Ucp {
    private Ucp() {}

    private static final FunctionDescriptor L_L = FunctionDescriptor.of(JAVA_LONG, JAVA_LONG);
    private static final FunctionDescriptor I_L = FunctionDescriptor.of(JAVA_INT, JAVA_LONG);
    private static final FunctionDescriptor V_L = FunctionDescriptor.ofVoid(JAVA_LONG);
    private static final FunctionDescriptor I_LL = FunctionDescriptor.of(JAVA_INT, JAVA_LONG, JAVA_LONG);
    private static final FunctionDescriptor I_LLL = FunctionDescriptor.of(JAVA_INT, JAVA_LONG, JAVA_LONG, JAVA_LONG);
    private static final FunctionDescriptor V_LL = FunctionDescriptor.ofVoid(JAVA_LONG, JAVA_LONG);

    private static final FunctionDescriptor L_LL = FunctionDescriptor.of(JAVA_LONG, JAVA_LONG, JAVA_LONG);
    private static final FunctionDescriptor L_LLLL = FunctionDescriptor.of(JAVA_LONG, JAVA_LONG, JAVA_LONG, JAVA_LONG,
            JAVA_LONG);
    private static final FunctionDescriptor L_LLLLL = FunctionDescriptor.of(JAVA_LONG, JAVA_LONG, JAVA_LONG, JAVA_LONG,
            JAVA_LONG, JAVA_LONG);
    private static final FunctionDescriptor L_LLLLLL = FunctionDescriptor.of(JAVA_LONG, JAVA_LONG, JAVA_LONG,
            JAVA_LONG, JAVA_LONG, JAVA_LONG, JAVA_LONG);

    /** The library, loaded once; a failure is kept and reported, never thrown from class init. */
    private static final class Lib {
        static final Throwable FAILURE;
        static final String LOCATION;
        static final SymbolLookup UCP, UCS, LIBC;

        static {
            Throwable failure = null;
            String location = null;
            SymbolLookup ucp = null, ucs = null, libc = null;
            try {
                libc = NativeAccess.defaultLookup();
                LibC.prepareEnvironment(libc);
                if (LibC.ucsLoadedBefore) {
                    org.slf4j.LoggerFactory.getLogger(Ucp.class).warn("ucx4j: UCX (libucs) was loaded into this "
                            + "process before ucx4j: its load-time settings did not come from ucx4j, so UCX may "
                            + "have installed handlers for the JVM's signals; start the JVM with UCX_ERROR_SIGNALS= "
                            + "(empty) and UCX_DEBUG_SIGNO=0 in its environment");
                }
                UcxLibrary lib = UcxLibrary.load();
                location = lib.location;
                ucp = lib.ucp;
                ucs = lib.ucs;
            } catch (Throwable t) {
                failure = t;
            }
            FAILURE = failure;
            LOCATION = location;
            UCP = ucp;
            UCS = ucs;
            LIBC = libc;
        }
    }

    /** Downcall handles, resolved when the library loaded; a missing symbol fails the whole load. */
    private static final class Holder {
        static Throwable failure = Lib.FAILURE;
        /**
         * No thread-state transition: only for short calls that never block and can never call back into Java
         * (an upcall inside a critical downcall is undefined behaviour).
         */
        static final Linker.Option CRITICAL = Linker.Option.critical(false);

        static final MethodHandle GET_VERSION = ucp("ucp_get_version",
                FunctionDescriptor.ofVoid(JAVA_LONG, JAVA_LONG, JAVA_LONG));
        static final MethodHandle CONFIG_READ = ucp("ucp_config_read", I_LLL);
        static final MethodHandle CONFIG_MODIFY = ucp("ucp_config_modify", I_LLL);
        static final MethodHandle CONFIG_RELEASE = ucp("ucp_config_release", V_L);
        static final MethodHandle CONFIG_PRINT = ucp("ucp_config_print",
                FunctionDescriptor.ofVoid(JAVA_LONG, JAVA_LONG, JAVA_LONG, JAVA_INT));
        static final MethodHandle INIT_VERSION = ucp("ucp_init_version",
                FunctionDescriptor.of(JAVA_INT, JAVA_INT, JAVA_INT, JAVA_LONG, JAVA_LONG, JAVA_LONG));
        static final MethodHandle CLEANUP = ucp("ucp_cleanup", V_L);
        static final MethodHandle CONTEXT_PRINT_INFO = ucp("ucp_context_print_info", V_LL);
        static final MethodHandle WORKER_CREATE = ucp("ucp_worker_create", I_LLL);
        static final MethodHandle WORKER_DESTROY = ucp("ucp_worker_destroy", V_L);
        static final MethodHandle WORKER_PRINT_INFO = ucp("ucp_worker_print_info", V_LL);
        static final MethodHandle WORKER_PROGRESS = ucp("ucp_worker_progress", I_L);
        static final MethodHandle WORKER_GET_EFD = ucp("ucp_worker_get_efd", I_LL);
        static final MethodHandle WORKER_ARM = ucp("ucp_worker_arm", I_L);
        static final MethodHandle WORKER_SIGNAL = ucp("ucp_worker_signal", I_L, CRITICAL);
        static final MethodHandle WORKER_QUERY = ucp("ucp_worker_query", I_LL);
        static final MethodHandle CONTEXT_QUERY = ucp("ucp_context_query", I_LL);
        static final MethodHandle WORKER_RELEASE_ADDRESS = ucp("ucp_worker_release_address", V_LL);
        static final MethodHandle EP_CREATE = ucp("ucp_ep_create", I_LLL);
        static final MethodHandle EP_CLOSE_NBX = ucp("ucp_ep_close_nbx", L_LL);
        static final MethodHandle EP_PRINT_INFO = ucp("ucp_ep_print_info", V_LL);
        static final MethodHandle TAG_SEND_NBX = ucp("ucp_tag_send_nbx", L_LLLLL);
        /** The same function as a critical call, for sends made inside the call where UCX cannot call back. */
        static final MethodHandle TAG_SEND_CRITICAL = ucp("ucp_tag_send_nbx", L_LLLLL, CRITICAL);
        static final MethodHandle STREAM_SEND_CRITICAL = ucp("ucp_stream_send_nbx", L_LLLL, CRITICAL);
        /** ucp_tag_recv_nbx without a callback: it queues the request, or copies a small message that waits. */
        static final MethodHandle TAG_RECV_CRITICAL = ucp("ucp_tag_recv_nbx", L_LLLLLL, CRITICAL);
        static final MethodHandle TAG_RECV_NBX = ucp("ucp_tag_recv_nbx", L_LLLLLL);
        static final MethodHandle TAG_PROBE_NB = ucp("ucp_tag_probe_nb", FunctionDescriptor.of(JAVA_LONG, JAVA_LONG,
                JAVA_LONG, JAVA_LONG, JAVA_INT, JAVA_LONG), CRITICAL);
        static final MethodHandle TAG_MSG_RECV_NBX = ucp("ucp_tag_msg_recv_nbx", L_LLLLL);
        static final MethodHandle STREAM_SEND_NBX = ucp("ucp_stream_send_nbx", L_LLLL);
        static final MethodHandle STREAM_RECV_NBX = ucp("ucp_stream_recv_nbx", L_LLLLL);
        static final MethodHandle STREAM_RECV_DATA_NB = ucp("ucp_stream_recv_data_nb", L_LL);
        static final MethodHandle STREAM_DATA_RELEASE = ucp("ucp_stream_data_release", V_LL);
        /** ucp_stream_recv_nbx never calls back (it copies what has arrived, or queues the request). */
        static final MethodHandle STREAM_RECV_SMALL = ucp("ucp_stream_recv_nbx", L_LLLLL, CRITICAL);
        static final MethodHandle EP_FLUSH_NBX = ucp("ucp_ep_flush_nbx", L_LL);
        static final MethodHandle SET_AM_RECV_HANDLER = ucp("ucp_worker_set_am_recv_handler", I_LL);
        static final MethodHandle AM_SEND_NBX = ucp("ucp_am_send_nbx", FunctionDescriptor.of(JAVA_LONG, JAVA_LONG,
                JAVA_INT, JAVA_LONG, JAVA_LONG, JAVA_LONG, JAVA_LONG, JAVA_LONG));
        static final MethodHandle AM_SEND_CRITICAL = ucp("ucp_am_send_nbx", FunctionDescriptor.of(JAVA_LONG, JAVA_LONG,
                JAVA_INT, JAVA_LONG, JAVA_LONG, JAVA_LONG, JAVA_LONG, JAVA_LONG), CRITICAL);
        static final MethodHandle AM_RECV_DATA_NBX = ucp("ucp_am_recv_data_nbx", L_LLLLL);
        static final MethodHandle AM_DATA_RELEASE = ucp("ucp_am_data_release", V_LL);
        static final MethodHandle MEM_MAP = ucp("ucp_mem_map", I_LLL);
        static final MethodHandle MEM_UNMAP = ucp("ucp_mem_unmap", I_LL);
        static final MethodHandle MEM_QUERY = ucp("ucp_mem_query", I_LL);
        static final MethodHandle RKEY_PACK = ucp("ucp_rkey_pack", FunctionDescriptor.of(JAVA_INT, JAVA_LONG,
                JAVA_LONG, JAVA_LONG, JAVA_LONG));
        static final MethodHandle RKEY_BUFFER_RELEASE = ucp("ucp_rkey_buffer_release", V_L);
        static final MethodHandle EP_RKEY_UNPACK = ucp("ucp_ep_rkey_unpack", I_LLL);
        static final MethodHandle RKEY_DESTROY = ucp("ucp_rkey_destroy", V_L);
        static final MethodHandle PUT_NBX = ucp("ucp_put_nbx", L_LLLLLL);
        static final MethodHandle GET_NBX = ucp("ucp_get_nbx", L_LLLLLL);
        static final MethodHandle WORKER_FENCE = ucp("ucp_worker_fence", I_L);
        static final MethodHandle WORKER_FLUSH_NBX = ucp("ucp_worker_flush_nbx", L_LL);
        static final MethodHandle REQUEST_CANCEL = ucp("ucp_request_cancel", V_LL);
        static final MethodHandle REQUEST_FREE = ucp("ucp_request_free", V_L, CRITICAL);
        static final MethodHandle REQUEST_CHECK_STATUS = ucp("ucp_request_check_status", I_L, CRITICAL);
        static final MethodHandle TAG_RECV_REQUEST_TEST = ucp("ucp_tag_recv_request_test", I_LL, CRITICAL);
        static final MethodHandle STREAM_RECV_REQUEST_TEST = ucp("ucp_stream_recv_request_test", I_LL, CRITICAL);
        static final MethodHandle STATUS_STRING = lookup(Lib.UCS, "ucs_status_string",
                FunctionDescriptor.of(ADDRESS, JAVA_INT), CRITICAL);
        static final MethodHandle GLOBAL_OPTS_GET = lookup(Lib.UCS, "ucs_global_opts_get_value",
                FunctionDescriptor.of(JAVA_INT, JAVA_LONG, JAVA_LONG, JAVA_LONG));
        static final MethodHandle POLL = libc("poll", FunctionDescriptor.of(JAVA_INT, JAVA_LONG, JAVA_LONG, JAVA_INT));
        static final MethodHandle OPEN_MEMSTREAM = libc("open_memstream", L_LL);
        static final MethodHandle FCLOSE = libc("fclose", I_L);
        /** malloc and free never call back into Java and are short: critical calls (one per small message). */
        static final MethodHandle FREE = lookup(Lib.LIBC, "free", V_L, CRITICAL);
        static final MethodHandle MALLOC = lookup(Lib.LIBC, "malloc", L_L, CRITICAL);
        static final MethodHandle GETENV = libc("getenv", L_L);
        static final MethodHandle SETENV = libc("setenv", FunctionDescriptor.of(JAVA_INT, JAVA_LONG, JAVA_LONG,
                JAVA_INT));
        static final Throwable FAILURE = failure;

        private static MethodHandle ucp(String name, FunctionDescriptor fd, Linker.Option... options) {
            return lookup(Lib.UCP, name, fd, options);
        }

        private static MethodHandle libc(String name, FunctionDescriptor fd) {
            return lookup(Lib.LIBC, name, fd);
        }

        private static MethodHandle lookup(SymbolLookup lib, String name, FunctionDescriptor fd,
                Linker.Option... options) {
            if (failure != null || lib == null) {
                return null;
            }
            try {
                return NativeAccess.downcall(lib, name, fd, options);
            } catch (Throwable t) {
                failure = t;
                return null;
            }
        }
    }

    /** Null when libucp loaded and every symbol resolved; otherwise why not. */
    public static Throwable loadFailure() {
        return Holder.FAILURE;
    }

    /** Where libucp was loaded from (for {@code info}). */
    public static String location() {
        return Lib.LOCATION;
    }

    public static void ensureLoaded() {
        if (Holder.FAILURE != null) {
            throw new IllegalStateException("UCX is not available: " + Holder.FAILURE.getMessage(), Holder.FAILURE);
        }
    }

    private static RuntimeException rethrow(Throwable t) {
        if (t instanceof RuntimeException r) return r;
        if (t instanceof Error e) throw e;
        return new IllegalStateException(t);
    }

    /**
     * A {@code ucs_status_t} as returned or passed by UCX: the enum is packed into one byte, so only the low 8 bits
     * of the register are defined; sign-extend them.
     */
    public static int status(int raw) {
        return (byte) raw;
    }

    /** {major, minor, release} of the loaded libucp. */
    public static int[] version() {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(JAVA_INT, 3);
            Holder.GET_VERSION.invokeExact(v.address(), v.address() + 4, v.address() + 8);
            return new int[] {v.getAtIndex(JAVA_INT, 0), v.getAtIndex(JAVA_INT, 1), v.getAtIndex(JAVA_INT, 2)};
        } catch (Throwable t) {
            throw rethrow(t);
        }
    }

    public static int configRead(long envPrefix, long fileName, long configOut) {
        try { return status((int) Holder.CONFIG_READ.invokeExact(envPrefix, fileName, configOut)); } catch (Throwable t) { throw rethrow(t); }
    }

    public static int configModify(long config, long name, long value) {
        try { return status((int) Holder.CONFIG_MODIFY.invokeExact(config, name, value)); } catch (Throwable t) { throw rethrow(t); }
    }

    public static void configRelease(long config) {
        try { Holder.CONFIG_RELEASE.invokeExact(config); } catch (Throwable t) { throw rethrow(t); }
    }

    public static void configPrint(long config, long file, long title, int flags) {
        try { Holder.CONFIG_PRINT.invokeExact(config, file, title, flags); } catch (Throwable t) { throw rethrow(t); }
    }

    public static int initVersion(long params, long config, long contextOut) {
        try {
            return status((int) Holder.INIT_VERSION.invokeExact(Structs.UCP_API_MAJOR, Structs.UCP_API_MINOR, params, config,
                    contextOut));
        } catch (Throwable t) { throw rethrow(t); }
    }

    public static void cleanup(long context) {
        try { Holder.CLEANUP.invokeExact(context); } catch (Throwable t) { throw rethrow(t); }
    }

    public static void contextPrintInfo(long context, long file) {
        try { Holder.CONTEXT_PRINT_INFO.invokeExact(context, file); } catch (Throwable t) { throw rethrow(t); }
    }

    public static int workerCreate(long context, long params, long workerOut) {
        try { return status((int) Holder.WORKER_CREATE.invokeExact(context, params, workerOut)); } catch (Throwable t) { throw rethrow(t); }
    }

    public static void workerDestroy(long worker) {
        try { Holder.WORKER_DESTROY.invokeExact(worker); } catch (Throwable t) { throw rethrow(t); }
    }

    public static void workerPrintInfo(long worker, long file) {
        try { Holder.WORKER_PRINT_INFO.invokeExact(worker, file); } catch (Throwable t) { throw rethrow(t); }
    }

    public static int workerProgress(long worker) {
        try { return (int) Holder.WORKER_PROGRESS.invokeExact(worker); } catch (Throwable t) { throw rethrow(t); }
    }

    public static int workerGetEfd(long worker, long fdOut) {
        try { return status((int) Holder.WORKER_GET_EFD.invokeExact(worker, fdOut)); } catch (Throwable t) { throw rethrow(t); }
    }

    public static int workerArm(long worker) {
        try { return status((int) Holder.WORKER_ARM.invokeExact(worker)); } catch (Throwable t) { throw rethrow(t); }
    }

    public static int workerSignal(long worker) {
        try { return status((int) Holder.WORKER_SIGNAL.invokeExact(worker)); } catch (Throwable t) { throw rethrow(t); }
    }

    /**
     * The worker's address ({@code ucp_worker_query} with {@code UCP_WORKER_ATTR_FIELD_ADDRESS}: the same packing
     * as {@code ucp_worker_get_address}, which UCX deprecated in 1.14), copied; UCX's buffer is released.
     */
    public static byte[] workerAddress(long worker) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment attr = a.allocate(Structs.UCP_WORKER_ATTR);
            attr.set(JAVA_LONG, Structs.WA_FIELD_MASK, Structs.UCP_WORKER_ATTR_FIELD_ADDRESS);
            int st = status((int) Holder.WORKER_QUERY.invokeExact(worker, attr.address()));
            if (st != Status.OK) {
                throw new IllegalStateException("ucp_worker_query (address) failed: " + statusString(st));
            }
            long addr = attr.get(JAVA_LONG, Structs.WA_ADDRESS);
            long len = attr.get(JAVA_LONG, Structs.WA_ADDRESS_LENGTH);
            byte[] b = NativeAccess.view(addr, len).toArray(java.lang.foreign.ValueLayout.JAVA_BYTE);
            Holder.WORKER_RELEASE_ADDRESS.invokeExact(worker, addr);
            return b;
        } catch (Throwable t) {
            throw rethrow(t);
        }
    }

    /**
     * The memory types the context can move ({@code ucp_context_query}: a bit per {@code ucs_memory_type_t}), or
     * just host memory's bit where the query fails.
     */
    public static long contextMemoryTypes(long context) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment attr = a.allocate(Math.max(Structs.UCP_CONTEXT_ATTR.byteSize(), 256), 16); // 1.20 grew it
            attr.set(JAVA_LONG, Structs.CA_FIELD_MASK, Structs.UCP_ATTR_FIELD_MEMORY_TYPES);
            int st = status((int) Holder.CONTEXT_QUERY.invokeExact(context, attr.address()));
            return st == Status.OK ? attr.get(JAVA_LONG, Structs.CA_MEMORY_TYPES) : 1L << Structs.UCS_MEMORY_TYPE_HOST;
        } catch (Throwable t) {
            throw rethrow(t);
        }
    }

    /**
     * The largest active-message header this worker's transports take ({@code ucp_worker_query},
     * {@code max_am_header}: the smallest over every transport the worker opened).
     */
    public static long workerMaxAmHeader(long worker) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment attr = a.allocate(Structs.UCP_WORKER_ATTR);
            attr.set(JAVA_LONG, Structs.WA_FIELD_MASK, Structs.UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER);
            int st = status((int) Holder.WORKER_QUERY.invokeExact(worker, attr.address()));
            if (st != Status.OK) {
                throw new IllegalStateException("ucp_worker_query failed: " + statusString(st));
            }
            return attr.get(JAVA_LONG, Structs.WA_MAX_AM_HEADER);
        } catch (Throwable t) {
            throw rethrow(t);
        }
    }

    public static int epCreate(long worker, long params, long epOut) {
        try { return status((int) Holder.EP_CREATE.invokeExact(worker, params, epOut)); } catch (Throwable t) { throw rethrow(t); }
    }

    public static long epCloseNbx(long ep, long param) {
        try { return (long) Holder.EP_CLOSE_NBX.invokeExact(ep, param); } catch (Throwable t) { throw rethrow(t); }
    }

    public static void epPrintInfo(long ep, long file) {
        try { Holder.EP_PRINT_INFO.invokeExact(ep, file); } catch (Throwable t) { throw rethrow(t); }
    }

    public static long tagSendNbx(long ep, long buffer, long count, long tag, long param) {
        try { return (long) Holder.TAG_SEND_NBX.invokeExact(ep, buffer, count, tag, param); } catch (Throwable t) { throw rethrow(t); }
    }

    /**
     * {@code ucp_tag_send_nbx} as a critical call: only where UCX cannot call back into Java inside the send (its
     * own callback runs later, from progress; no socket lane whose error handling would run inside the call).
     */
    public static long tagSendCritical(long ep, long buffer, long count, long tag, long param) {
        try { return (long) Holder.TAG_SEND_CRITICAL.invokeExact(ep, buffer, count, tag, param); } catch (Throwable t) { throw rethrow(t); }
    }

    /**
     * {@code ucp_tag_recv_nbx} as a critical call: only right after {@code ucp_tag_probe_nb} found no match for the
     * same tag and mask on the owner thread, so UCX can only queue the request (no copy, no callback).
     */
    public static long tagRecvQueued(long worker, long buffer, long count, long tag, long mask, long param) {
        try { return (long) Holder.TAG_RECV_CRITICAL.invokeExact(worker, buffer, count, tag, mask, param); } catch (Throwable t) { throw rethrow(t); }
    }

    /**
     * {@code ucp_tag_recv_nbx}: a critical call for small buffers unless {@code mayCallBack} (as
     * {@link #streamRecvNbx}; a critical call must never call back into Java), a regular one otherwise. UCX may call
     * back when {@code param} names a callback, or when the message the receive takes makes it send (a rendezvous
     * reply) over a socket, whose failure UCX handles inside the call.
     */
    public static long tagRecvNbx(long worker, long buffer, long count, long tag, long mask, long param,
            boolean mayCallBack) {
        try {
            return count <= CRITICAL_COPY_MAX && !mayCallBack
                    ? (long) Holder.TAG_RECV_CRITICAL.invokeExact(worker, buffer, count, tag, mask, param)
                    : (long) Holder.TAG_RECV_NBX.invokeExact(worker, buffer, count, tag, mask, param);
        } catch (Throwable t) { throw rethrow(t); }
    }

    /** {@code ucp_stream_send_nbx} as a critical call: only where UCX cannot call back (as {@link #tagSendCritical}). */
    public static long streamSendCritical(long ep, long buffer, long count, long param) {
        try { return (long) Holder.STREAM_SEND_CRITICAL.invokeExact(ep, buffer, count, param); } catch (Throwable t) { throw rethrow(t); }
    }

    public static long streamSendNbx(long ep, long buffer, long count, long param) {
        try { return (long) Holder.STREAM_SEND_NBX.invokeExact(ep, buffer, count, param); } catch (Throwable t) { throw rethrow(t); }
    }

    /**
     * {@code ucp_stream_recv_nbx}; a critical call for small receives (it never calls back, and a small copy keeps
     * the thread out of safepoints only briefly), a regular one for large.
     */
    public static long streamRecvNbx(long ep, long buffer, long count, long lengthOut, long param) {
        try {
            return count <= CRITICAL_COPY_MAX
                    ? (long) Holder.STREAM_RECV_SMALL.invokeExact(ep, buffer, count, lengthOut, param)
                    : (long) Holder.STREAM_RECV_NBX.invokeExact(ep, buffer, count, lengthOut, param);
        } catch (Throwable t) { throw rethrow(t); }
    }

    /**
     * {@code ucp_stream_recv_data_nb}: the oldest stream data UCX queued on {@code ep}, its length written at
     * {@code lengthOut}; 0 when none, else to be given back with {@link #streamDataRelease}.
     */
    public static long streamRecvDataNb(long ep, long lengthOut) {
        try { return (long) Holder.STREAM_RECV_DATA_NB.invokeExact(ep, lengthOut); } catch (Throwable t) { throw rethrow(t); }
    }

    public static void streamDataRelease(long ep, long data) {
        try { Holder.STREAM_DATA_RELEASE.invokeExact(ep, data); } catch (Throwable t) { throw rethrow(t); }
    }

    /** The largest copy a critical call may make. */
    private static final long CRITICAL_COPY_MAX = 64 * 1024;

    public static long epFlushNbx(long ep, long param) {
        try { return (long) Holder.EP_FLUSH_NBX.invokeExact(ep, param); } catch (Throwable t) { throw rethrow(t); }
    }

    public static int setAmRecvHandler(long worker, long param) {
        try { return status((int) Holder.SET_AM_RECV_HANDLER.invokeExact(worker, param)); } catch (Throwable t) { throw rethrow(t); }
    }

    /** {@code ucp_am_send_nbx} as a critical call: only where UCX cannot call back (as {@link #tagSendCritical}). */
    public static long amSendCritical(long ep, int id, long header, long headerLength, long buffer, long count, long param) {
        try { return (long) Holder.AM_SEND_CRITICAL.invokeExact(ep, id, header, headerLength, buffer, count, param); } catch (Throwable t) { throw rethrow(t); }
    }

    public static long amSendNbx(long ep, int id, long header, long headerLength, long buffer, long count, long param) {
        try { return (long) Holder.AM_SEND_NBX.invokeExact(ep, id, header, headerLength, buffer, count, param); } catch (Throwable t) { throw rethrow(t); }
    }

    public static long amRecvDataNbx(long worker, long desc, long buffer, long count, long param) {
        try { return (long) Holder.AM_RECV_DATA_NBX.invokeExact(worker, desc, buffer, count, param); } catch (Throwable t) { throw rethrow(t); }
    }

    /**
     * {@code ucp_am_data_release}: drops a message whose callback returned {@code UCS_INPROGRESS}; for a rendezvous
     * message that was never pulled, UCX acknowledges it to the sender (whose send then completes).
     */
    public static void amDataRelease(long worker, long data) {
        try { Holder.AM_DATA_RELEASE.invokeExact(worker, data); } catch (Throwable t) { throw rethrow(t); }
    }

    public static int memMap(long context, long params, long memhOut) {
        try { return status((int) Holder.MEM_MAP.invokeExact(context, params, memhOut)); } catch (Throwable t) { throw rethrow(t); }
    }

    public static int memQuery(long memh, long attr) {
        try { return status((int) Holder.MEM_QUERY.invokeExact(memh, attr)); } catch (Throwable t) { throw rethrow(t); }
    }

    public static int memUnmap(long context, long memh) {
        try { return status((int) Holder.MEM_UNMAP.invokeExact(context, memh)); } catch (Throwable t) { throw rethrow(t); }
    }

    public static int rkeyPack(long context, long memh, long bufferOut, long sizeOut) {
        try { return status((int) Holder.RKEY_PACK.invokeExact(context, memh, bufferOut, sizeOut)); } catch (Throwable t) { throw rethrow(t); }
    }

    public static void rkeyBufferRelease(long buffer) {
        try { Holder.RKEY_BUFFER_RELEASE.invokeExact(buffer); } catch (Throwable t) { throw rethrow(t); }
    }

    public static int epRkeyUnpack(long ep, long buffer, long rkeyOut) {
        try { return status((int) Holder.EP_RKEY_UNPACK.invokeExact(ep, buffer, rkeyOut)); } catch (Throwable t) { throw rethrow(t); }
    }

    public static void rkeyDestroy(long rkey) {
        try { Holder.RKEY_DESTROY.invokeExact(rkey); } catch (Throwable t) { throw rethrow(t); }
    }

    public static long putNbx(long ep, long buffer, long count, long remoteAddress, long rkey, long param) {
        try { return (long) Holder.PUT_NBX.invokeExact(ep, buffer, count, remoteAddress, rkey, param); } catch (Throwable t) { throw rethrow(t); }
    }

    public static long getNbx(long ep, long buffer, long count, long remoteAddress, long rkey, long param) {
        try { return (long) Holder.GET_NBX.invokeExact(ep, buffer, count, remoteAddress, rkey, param); } catch (Throwable t) { throw rethrow(t); }
    }

    public static int workerFence(long worker) {
        try { return status((int) Holder.WORKER_FENCE.invokeExact(worker)); } catch (Throwable t) { throw rethrow(t); }
    }

    public static long workerFlushNbx(long worker, long param) {
        try { return (long) Holder.WORKER_FLUSH_NBX.invokeExact(worker, param); } catch (Throwable t) { throw rethrow(t); }
    }

    public static void requestCancel(long worker, long request) {
        try { Holder.REQUEST_CANCEL.invokeExact(worker, request); } catch (Throwable t) { throw rethrow(t); }
    }

    public static void requestFree(long request) {
        try { Holder.REQUEST_FREE.invokeExact(request); } catch (Throwable t) { throw rethrow(t); }
    }

    /** {@code ucp_tag_probe_nb}: a matching unexpected message (0 if none); {@code info} gets length and tag. */
    public static long tagProbeNb(long worker, long tag, long mask, boolean remove, long info) {
        try { return (long) Holder.TAG_PROBE_NB.invokeExact(worker, tag, mask, remove ? 1 : 0, info); } catch (Throwable t) { throw rethrow(t); }
    }

    public static long tagMsgRecvNbx(long worker, long buffer, long count, long message, long param) {
        try { return (long) Holder.TAG_MSG_RECV_NBX.invokeExact(worker, buffer, count, message, param); } catch (Throwable t) { throw rethrow(t); }
    }

    /** Status of a tag receive plus, once complete, its length and sender tag in {@code info}. */
    public static int streamRecvRequestTest(long request, long lengthOut) {
        try { return status((int) Holder.STREAM_RECV_REQUEST_TEST.invokeExact(request, lengthOut)); } catch (Throwable t) { throw rethrow(t); }
    }

    public static int tagRecvRequestTest(long request, long info) {
        try { return status((int) Holder.TAG_RECV_REQUEST_TEST.invokeExact(request, info)); } catch (Throwable t) { throw rethrow(t); }
    }

    public static int requestCheckStatus(long request) {
        try { return status((int) Holder.REQUEST_CHECK_STATUS.invokeExact(request)); } catch (Throwable t) { throw rethrow(t); }
    }

    static String statusString(int status) {
        try {
            MemorySegment s = (MemorySegment) Holder.STATUS_STRING.invokeExact(status);
            return NativeAccess.cString(s);
        } catch (Throwable t) { throw rethrow(t); }
    }

    /**
     * Makes libucs create its memory-type cache (one lookup; the cache stays empty on hosts without GPU memory).
     * UCX's stream send takes its short protocol only while that cache exists and is empty, and UCX itself creates
     * it only when a GPU memory domain is present: without this, every stream send on a host-only machine goes
     * through a request. Optional: false when libucs lacks the symbol or the cache is disabled
     * ({@code UCX_MEMTYPE_CACHE=n}).
     */
    public static boolean createMemtypeCache() {
        try (java.lang.foreign.Arena a = java.lang.foreign.Arena.ofConfined()) {
            MethodHandle lookup = NativeAccess.downcall(Lib.UCS, "ucs_memtype_cache_lookup",
                    FunctionDescriptor.of(JAVA_INT, JAVA_LONG, JAVA_LONG, JAVA_LONG));
            // the address looked up, then room for the (unused) memory-info result
            MemorySegment probe = a.allocate(32 + Structs.UCS_MEMORY_INFO_ROOM, 64);
            int st = status((int) lookup.invokeExact(probe.address(), 1L, probe.address() + 32));
            return st != Status.ERR_UNSUPPORTED;
        } catch (Throwable t) {
            return false;
        }
    }

    /** libc poll(2) on one fd for POLLIN; returns poll's result. */
    public static int poll(long pollfd, int timeoutMs) {
        try { return (int) Holder.POLL.invokeExact(pollfd, 1L, timeoutMs); } catch (Throwable t) { throw rethrow(t); }
    }

    /** True when {@code name} (without {@code UCX_}) is one of libucs's global options (LOG_LEVEL...). */
    public static boolean isGlobalOption(String name) {
        try (java.lang.foreign.Arena a = java.lang.foreign.Arena.ofConfined()) {
            MemorySegment value = a.allocate(256);
            return status((int) Holder.GLOBAL_OPTS_GET.invokeExact(a.allocateFrom(name).address(), value.address(),
                    256L)) == Status.OK;
        } catch (Throwable t) {
            throw rethrow(t);
        }
    }

    /** ucx4j's UCX environment defaults ({@code UCX_KEY -> value} in effect in this process), sorted by key. */
    public static java.util.SortedMap<String, String> environmentDefaults() {
        ensureLoaded();
        java.util.SortedMap<String, String> m = new java.util.TreeMap<>();
        for (String key : LibC.DEFAULTS.keySet()) {
            String v = getenv("UCX_" + key);
            if (v != null) {
                m.put("UCX_" + key, v);
            }
        }
        return m;
    }

    /**
     * Whether ucx4j's default for {@code key} (without {@code UCX_}) is in effect: the environment did not set it
     * at startup and no option has changed it since.
     */
    public static boolean defaultApplied(String key) {
        ensureLoaded();
        return LibC.APPLIED.contains(key) && LibC.DEFAULTS.get(key).equals(getenv("UCX_" + key));
    }

    /** libc {@code getenv}: the environment as UCX sees it ({@link System#getenv} is a copy from JVM start). */
    public static String getenv(String name) {
        try (java.lang.foreign.Arena a = java.lang.foreign.Arena.ofConfined()) {
            long p = (long) Holder.GETENV.invokeExact(a.allocateFrom(name).address());
            return p == 0 ? null : NativeAccess.cString(NativeAccess.view(p, Long.MAX_VALUE));
        } catch (Throwable t) {
            throw rethrow(t);
        }
    }

    /**
     * Held while ucx4j changes the process environment and while UCX's table printer reads it (hundreds of
     * {@code getenv} calls), so that two instances opening at once do not read each other's half-set options.
     */
    private static final Object ENVIRONMENT = new Object();

    /** libc {@code setenv}: the process environment UCX reads its transport options from. */
    public static void setenv(String name, String value, boolean overwrite) {
        synchronized (ENVIRONMENT) {
            setenvLocked(name, value, overwrite);
        }
    }

    private static void setenvLocked(String name, String value, boolean overwrite) {
        try (java.lang.foreign.Arena a = java.lang.foreign.Arena.ofConfined()) {
            int rc = (int) Holder.SETENV.invokeExact(a.allocateFrom(name).address(), a.allocateFrom(value).address(),
                    overwrite ? 1 : 0);
            if (rc != 0) {
                throw new IllegalStateException("setenv " + name + " failed");
            }
        } catch (Throwable t) {
            throw rethrow(t);
        }
    }

    public static long malloc(long size) {
        try { return (long) Holder.MALLOC.invokeExact(size); } catch (Throwable t) { throw rethrow(t); }
    }

    public static void free(long ptr) {
        try { Holder.FREE.invokeExact(ptr); } catch (Throwable t) { throw rethrow(t); }
    }

    /**
     * Every configuration table UCX has registered (UCP's, UCS's and each loaded transport's), each value as UCX
     * resolves it now (its own variable, a shared one such as {@code UCX_MM_*} for the shared-memory transports, a
     * {@code ucx.conf} file, or the default), as {@code UCX_KEY=value} lines: what {@code ucx_info -c} prints. Null
     * when libucs does not export what that takes. libucs's {@code ucs_config_parser_print_all_opts} gained a fifth
     * argument (a name filter; null: none) in 1.19; it is always passed, and ignored by the four-argument versions
     * (on x86-64 and AArch64 an extra argument travels in a register the callee never reads).
     */
    public static String printAllOptions() {
        if (AllOptions.PRINT == null || AllOptions.LIST == null) {
            return null;
        }
        try (Arena a = Arena.ofConfined()) {
            MemorySegment prefix = a.allocateFrom("UCX_");
            synchronized (ENVIRONMENT) {
                return capture(f -> {
                    try {
                        AllOptions.PRINT.invokeExact(f, prefix.address(), Structs.UCS_CONFIG_PRINT_CONFIG,
                                AllOptions.LIST.address(), 0L);
                    } catch (Throwable t) {
                        throw rethrow(t);
                    }
                });
            }
        }
    }

    /** libucs's table printer and its list of tables, looked up apart: both are optional. */
    private static final class AllOptions {
        static final MethodHandle PRINT = Lib.UCS == null ? null : NativeAccess.optionalDowncall(Lib.UCS,
                "ucs_config_parser_print_all_opts", FunctionDescriptor.ofVoid(JAVA_LONG, JAVA_LONG, JAVA_INT,
                        JAVA_LONG, JAVA_LONG)).orElse(null);
        static final MemorySegment LIST = Lib.UCS == null ? null
                : Lib.UCS.find("ucs_config_global_list").orElse(null);
    }

    /** Something UCX prints into a {@code FILE*}, captured as a string through open_memstream. */
    @FunctionalInterface
    public interface FilePrinter {
        void print(long file);
    }

    public static String capture(FilePrinter printer) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment bufp = a.allocate(JAVA_LONG);
            MemorySegment sizep = a.allocate(JAVA_LONG);
            long file = (long) Holder.OPEN_MEMSTREAM.invokeExact(bufp.address(), sizep.address());
            if (file == 0) {
                throw new IllegalStateException("open_memstream failed");
            }
            try {
                printer.print(file);
            } finally {
                int rc = (int) Holder.FCLOSE.invokeExact(file);
                assert rc == 0;
            }
            long buf = bufp.get(JAVA_LONG, 0);
            long size = sizep.get(JAVA_LONG, 0);
            String s = new String(NativeAccess.view(buf, size).toArray(java.lang.foreign.ValueLayout.JAVA_BYTE),
                    java.nio.charset.StandardCharsets.UTF_8);
            Holder.FREE.invokeExact(buf);
            return s;
        } catch (Throwable t) {
            throw rethrow(t);
        }
    }
}
