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

    private static final class Holder {
        static final Throwable FAILURE;
        static final String LOCATION;
        static final MethodHandle GET_VERSION, CONFIG_READ, CONFIG_MODIFY, CONFIG_RELEASE, CONFIG_PRINT, INIT_VERSION,
                CLEANUP, CONTEXT_PRINT_INFO, WORKER_CREATE, WORKER_DESTROY, WORKER_PRINT_INFO, WORKER_PROGRESS,
                WORKER_GET_EFD, WORKER_ARM, WORKER_SIGNAL, LISTENER_CREATE, LISTENER_DESTROY, LISTENER_QUERY,
                LISTENER_REJECT, CONN_REQUEST_QUERY, EP_CREATE, EP_CLOSE_NBX, EP_PRINT_INFO, TAG_SEND_NBX,
                TAG_RECV_NBX, STREAM_SEND_NBX, STREAM_RECV_NBX, EP_FLUSH_NBX, REQUEST_CANCEL, REQUEST_FREE, REQUEST_CHECK_STATUS,
                STATUS_STRING, POLL, OPEN_MEMSTREAM, FCLOSE, FREE, MALLOC;

        static {
            Throwable failure = null;
            String location = null;
            MethodHandle[] h = new MethodHandle[37];
            try {
                SymbolLookup libc = NativeAccess.defaultLookup();
                LibC.prepareEnvironment(libc);
                UcxLibrary lib = UcxLibrary.load();
                location = lib.location;
                SymbolLookup ucp = lib.ucp;
                SymbolLookup ucs = lib.ucs;
                Linker.Option critical = Linker.Option.critical(false);
                int i = 0;
                h[i++] = NativeAccess.downcall(ucp, "ucp_get_version",
                        FunctionDescriptor.ofVoid(JAVA_LONG, JAVA_LONG, JAVA_LONG));
                h[i++] = NativeAccess.downcall(ucp, "ucp_config_read", I_LLL);
                h[i++] = NativeAccess.downcall(ucp, "ucp_config_modify", I_LLL);
                h[i++] = NativeAccess.downcall(ucp, "ucp_config_release", V_L);
                h[i++] = NativeAccess.downcall(ucp, "ucp_config_print",
                        FunctionDescriptor.ofVoid(JAVA_LONG, JAVA_LONG, JAVA_LONG, JAVA_INT));
                h[i++] = NativeAccess.downcall(ucp, "ucp_init_version",
                        FunctionDescriptor.of(JAVA_INT, JAVA_INT, JAVA_INT, JAVA_LONG, JAVA_LONG, JAVA_LONG));
                h[i++] = NativeAccess.downcall(ucp, "ucp_cleanup", V_L);
                h[i++] = NativeAccess.downcall(ucp, "ucp_context_print_info", V_LL);
                h[i++] = NativeAccess.downcall(ucp, "ucp_worker_create", I_LLL);
                h[i++] = NativeAccess.downcall(ucp, "ucp_worker_destroy", V_L);
                h[i++] = NativeAccess.downcall(ucp, "ucp_worker_print_info", V_LL);
                h[i++] = NativeAccess.downcall(ucp, "ucp_worker_progress", I_L);
                h[i++] = NativeAccess.downcall(ucp, "ucp_worker_get_efd", I_LL);
                h[i++] = NativeAccess.downcall(ucp, "ucp_worker_arm", I_L);
                h[i++] = NativeAccess.downcall(ucp, "ucp_worker_signal", I_L, critical);
                h[i++] = NativeAccess.downcall(ucp, "ucp_listener_create", I_LLL);
                h[i++] = NativeAccess.downcall(ucp, "ucp_listener_destroy", V_L);
                h[i++] = NativeAccess.downcall(ucp, "ucp_listener_query", I_LL);
                h[i++] = NativeAccess.downcall(ucp, "ucp_listener_reject", I_LL);
                h[i++] = NativeAccess.downcall(ucp, "ucp_conn_request_query", I_LL);
                h[i++] = NativeAccess.downcall(ucp, "ucp_ep_create", I_LLL);
                h[i++] = NativeAccess.downcall(ucp, "ucp_ep_close_nbx", FunctionDescriptor.of(JAVA_LONG, JAVA_LONG, JAVA_LONG));
                h[i++] = NativeAccess.downcall(ucp, "ucp_ep_print_info", V_LL);
                h[i++] = NativeAccess.downcall(ucp, "ucp_tag_send_nbx",
                        FunctionDescriptor.of(JAVA_LONG, JAVA_LONG, JAVA_LONG, JAVA_LONG, JAVA_LONG, JAVA_LONG));
                h[i++] = NativeAccess.downcall(ucp, "ucp_tag_recv_nbx",
                        FunctionDescriptor.of(JAVA_LONG, JAVA_LONG, JAVA_LONG, JAVA_LONG, JAVA_LONG, JAVA_LONG, JAVA_LONG));
                h[i++] = NativeAccess.downcall(ucp, "ucp_stream_send_nbx",
                        FunctionDescriptor.of(JAVA_LONG, JAVA_LONG, JAVA_LONG, JAVA_LONG, JAVA_LONG));
                h[i++] = NativeAccess.downcall(ucp, "ucp_stream_recv_nbx",
                        FunctionDescriptor.of(JAVA_LONG, JAVA_LONG, JAVA_LONG, JAVA_LONG, JAVA_LONG, JAVA_LONG));
                h[i++] = NativeAccess.downcall(ucp, "ucp_ep_flush_nbx", FunctionDescriptor.of(JAVA_LONG, JAVA_LONG, JAVA_LONG));
                h[i++] = NativeAccess.downcall(ucp, "ucp_request_cancel", V_LL);
                h[i++] = NativeAccess.downcall(ucp, "ucp_request_free", V_L);
                h[i++] = NativeAccess.downcall(ucp, "ucp_request_check_status", I_L);
                h[i++] = NativeAccess.downcall(ucs, "ucs_status_string", FunctionDescriptor.of(ADDRESS, JAVA_INT), critical);
                h[i++] = NativeAccess.downcall(libc, "poll", FunctionDescriptor.of(JAVA_INT, JAVA_LONG, JAVA_LONG, JAVA_INT));
                h[i++] = NativeAccess.downcall(libc, "open_memstream", L_L.appendArgumentLayouts(JAVA_LONG));
                h[i++] = NativeAccess.downcall(libc, "fclose", I_L);
                h[i++] = NativeAccess.downcall(libc, "free", V_L);
                h[i++] = NativeAccess.downcall(libc, "malloc", L_L);
            } catch (Throwable t) {
                failure = t;
            }
            FAILURE = failure;
            LOCATION = location;
            int i = 0;
            GET_VERSION = h[i++]; CONFIG_READ = h[i++]; CONFIG_MODIFY = h[i++]; CONFIG_RELEASE = h[i++];
            CONFIG_PRINT = h[i++]; INIT_VERSION = h[i++]; CLEANUP = h[i++]; CONTEXT_PRINT_INFO = h[i++];
            WORKER_CREATE = h[i++]; WORKER_DESTROY = h[i++]; WORKER_PRINT_INFO = h[i++]; WORKER_PROGRESS = h[i++];
            WORKER_GET_EFD = h[i++]; WORKER_ARM = h[i++]; WORKER_SIGNAL = h[i++]; LISTENER_CREATE = h[i++];
            LISTENER_DESTROY = h[i++]; LISTENER_QUERY = h[i++]; LISTENER_REJECT = h[i++];
            CONN_REQUEST_QUERY = h[i++]; EP_CREATE = h[i++]; EP_CLOSE_NBX = h[i++]; EP_PRINT_INFO = h[i++];
            TAG_SEND_NBX = h[i++]; TAG_RECV_NBX = h[i++]; STREAM_SEND_NBX = h[i++]; STREAM_RECV_NBX = h[i++]; EP_FLUSH_NBX = h[i++];
            REQUEST_CANCEL = h[i++]; REQUEST_FREE = h[i++]; REQUEST_CHECK_STATUS = h[i++]; STATUS_STRING = h[i++];
            POLL = h[i++]; OPEN_MEMSTREAM = h[i++]; FCLOSE = h[i++]; FREE = h[i++]; MALLOC = h[i++];
        }
    }

    /** Null when libucp loaded and every symbol resolved; otherwise why not. */
    public static Throwable loadFailure() {
        return Holder.FAILURE;
    }

    /** Where libucp was loaded from (for {@code info}). */
    public static String location() {
        return Holder.LOCATION;
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
        try { return (int) Holder.CONFIG_READ.invokeExact(envPrefix, fileName, configOut); } catch (Throwable t) { throw rethrow(t); }
    }

    public static int configModify(long config, long name, long value) {
        try { return (int) Holder.CONFIG_MODIFY.invokeExact(config, name, value); } catch (Throwable t) { throw rethrow(t); }
    }

    public static void configRelease(long config) {
        try { Holder.CONFIG_RELEASE.invokeExact(config); } catch (Throwable t) { throw rethrow(t); }
    }

    public static void configPrint(long config, long file, long title, int flags) {
        try { Holder.CONFIG_PRINT.invokeExact(config, file, title, flags); } catch (Throwable t) { throw rethrow(t); }
    }

    public static int initVersion(long params, long config, long contextOut) {
        try {
            return (int) Holder.INIT_VERSION.invokeExact(Structs.UCP_API_MAJOR, Structs.UCP_API_MINOR, params, config,
                    contextOut);
        } catch (Throwable t) { throw rethrow(t); }
    }

    public static void cleanup(long context) {
        try { Holder.CLEANUP.invokeExact(context); } catch (Throwable t) { throw rethrow(t); }
    }

    public static void contextPrintInfo(long context, long file) {
        try { Holder.CONTEXT_PRINT_INFO.invokeExact(context, file); } catch (Throwable t) { throw rethrow(t); }
    }

    public static int workerCreate(long context, long params, long workerOut) {
        try { return (int) Holder.WORKER_CREATE.invokeExact(context, params, workerOut); } catch (Throwable t) { throw rethrow(t); }
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
        try { return (int) Holder.WORKER_GET_EFD.invokeExact(worker, fdOut); } catch (Throwable t) { throw rethrow(t); }
    }

    public static int workerArm(long worker) {
        try { return (int) Holder.WORKER_ARM.invokeExact(worker); } catch (Throwable t) { throw rethrow(t); }
    }

    public static int workerSignal(long worker) {
        try { return (int) Holder.WORKER_SIGNAL.invokeExact(worker); } catch (Throwable t) { throw rethrow(t); }
    }

    public static int listenerCreate(long worker, long params, long listenerOut) {
        try { return (int) Holder.LISTENER_CREATE.invokeExact(worker, params, listenerOut); } catch (Throwable t) { throw rethrow(t); }
    }

    public static void listenerDestroy(long listener) {
        try { Holder.LISTENER_DESTROY.invokeExact(listener); } catch (Throwable t) { throw rethrow(t); }
    }

    public static int listenerQuery(long listener, long attr) {
        try { return (int) Holder.LISTENER_QUERY.invokeExact(listener, attr); } catch (Throwable t) { throw rethrow(t); }
    }

    public static int listenerReject(long listener, long connRequest) {
        try { return (int) Holder.LISTENER_REJECT.invokeExact(listener, connRequest); } catch (Throwable t) { throw rethrow(t); }
    }

    public static int connRequestQuery(long connRequest, long attr) {
        try { return (int) Holder.CONN_REQUEST_QUERY.invokeExact(connRequest, attr); } catch (Throwable t) { throw rethrow(t); }
    }

    public static int epCreate(long worker, long params, long epOut) {
        try { return (int) Holder.EP_CREATE.invokeExact(worker, params, epOut); } catch (Throwable t) { throw rethrow(t); }
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

    public static long tagRecvNbx(long worker, long buffer, long count, long tag, long mask, long param) {
        try { return (long) Holder.TAG_RECV_NBX.invokeExact(worker, buffer, count, tag, mask, param); } catch (Throwable t) { throw rethrow(t); }
    }

    public static long streamSendNbx(long ep, long buffer, long count, long param) {
        try { return (long) Holder.STREAM_SEND_NBX.invokeExact(ep, buffer, count, param); } catch (Throwable t) { throw rethrow(t); }
    }

    public static long streamRecvNbx(long ep, long buffer, long count, long lengthOut, long param) {
        try { return (long) Holder.STREAM_RECV_NBX.invokeExact(ep, buffer, count, lengthOut, param); } catch (Throwable t) { throw rethrow(t); }
    }

    public static long epFlushNbx(long ep, long param) {
        try { return (long) Holder.EP_FLUSH_NBX.invokeExact(ep, param); } catch (Throwable t) { throw rethrow(t); }
    }

    public static void requestCancel(long worker, long request) {
        try { Holder.REQUEST_CANCEL.invokeExact(worker, request); } catch (Throwable t) { throw rethrow(t); }
    }

    public static void requestFree(long request) {
        try { Holder.REQUEST_FREE.invokeExact(request); } catch (Throwable t) { throw rethrow(t); }
    }

    public static int requestCheckStatus(long request) {
        try { return (int) Holder.REQUEST_CHECK_STATUS.invokeExact(request); } catch (Throwable t) { throw rethrow(t); }
    }

    static String statusString(int status) {
        try {
            MemorySegment s = (MemorySegment) Holder.STATUS_STRING.invokeExact(status);
            return NativeAccess.cString(s);
        } catch (Throwable t) { throw rethrow(t); }
    }

    /** libc poll(2) on one fd for POLLIN; returns poll's result. */
    public static int poll(long pollfd, int timeoutMs) {
        try { return (int) Holder.POLL.invokeExact(pollfd, 1L, timeoutMs); } catch (Throwable t) { throw rethrow(t); }
    }

    public static long malloc(long size) {
        try { return (long) Holder.MALLOC.invokeExact(size); } catch (Throwable t) { throw rethrow(t); }
    }

    public static void free(long ptr) {
        try { Holder.FREE.invokeExact(ptr); } catch (Throwable t) { throw rethrow(t); }
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
