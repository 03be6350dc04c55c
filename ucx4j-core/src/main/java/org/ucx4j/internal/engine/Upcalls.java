package org.ucx4j.internal.engine;

import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;
import static org.ucx4j.internal.ffi.Structs.ARP_RECV_ATTR;
import static org.ucx4j.internal.ffi.Structs.TRI_LENGTH;
import static org.ucx4j.internal.ffi.Structs.TRI_SENDER_TAG;

import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.MemorySegment;
import java.lang.invoke.MethodHandles;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.ucx4j.internal.ffi.NativeAccess;
import org.ucx4j.internal.ffi.Status;
import org.ucx4j.internal.ffi.Ucp;

/**
 * The functions UCX calls back (operation completions, arriving active messages, endpoint errors): one upcall
 * stub each, created once per JVM, and the registry through which a callback finds its {@link Engine}. The user
 * data UCX hands back holds the engine's id in its upper 32 bits and the operation's slot (or the endpoint's)
 * in its lower ones. Callbacks run on the thread driving the worker, inside {@code ucp_worker_progress}; they
 * never throw into native code.
 */
final class Upcalls {
    private static final Logger LOG = LoggerFactory.getLogger(Engine.class); // the engine's failures, as before

    static final MemorySegment SEND = stub("onSend", FunctionDescriptor.ofVoid(JAVA_LONG, JAVA_INT, JAVA_LONG));
    static final MemorySegment TAG_RECV = stub("onTagRecv",
            FunctionDescriptor.ofVoid(JAVA_LONG, JAVA_INT, JAVA_LONG, JAVA_LONG));
    static final MemorySegment STREAM_RECV = stub("onStreamRecv",
            FunctionDescriptor.ofVoid(JAVA_LONG, JAVA_INT, JAVA_LONG, JAVA_LONG));
    static final MemorySegment EP_ERROR = stub("onEndpointError",
            FunctionDescriptor.ofVoid(JAVA_LONG, JAVA_LONG, JAVA_INT));
    static final MemorySegment AM_RECV = stub("onActiveMessage", FunctionDescriptor.of(JAVA_INT, JAVA_LONG,
            JAVA_LONG, JAVA_LONG, JAVA_LONG, JAVA_LONG, JAVA_LONG));

    /** Open engines by id (written before the engine's worker can call back). */
    private static final Engine[] REGISTRY = new Engine[1 << 16];
    private static int nextId;

    private Upcalls() {
    }

    private static MemorySegment stub(String method, FunctionDescriptor fd) {
        try {
            return NativeAccess.upcall(MethodHandles.lookup().findStatic(Upcalls.class, method, fd.toMethodType()),
                    fd);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    static synchronized int register(Engine e) {
        for (int i = 0; i < REGISTRY.length; i++) {
            int id = (nextId + i) & (REGISTRY.length - 1);
            if (REGISTRY[id] == null) {
                REGISTRY[id] = e;
                nextId = id + 1;
                return id;
            }
        }
        throw new IllegalStateException("too many open UCX workers in this JVM");
    }

    static synchronized void unregister(int id) {
        REGISTRY[id] = null;
    }

    /** The user data that brings a callback back to {@code slot} of engine {@code engineId}. */
    static long userData(int engineId, int slot) {
        return ((long) engineId << 32) | slot;
    }

    private static Engine engine(long userData) {
        return REGISTRY[(int) (userData >>> 32)];
    }

    static void onSend(long request, int status, long userData) {
        try {
            engine(userData).requests.completeSlot((int) userData, request, Ucp.status(status), -1, 0);
        } catch (Throwable t) {
            LOG.error("ucx4j send callback failed", t);
        }
    }

    static void onTagRecv(long request, int status, long info, long userData) {
        try {
            long len = 0, tag = 0;
            status = Ucp.status(status);
            if (status == Status.OK && info != 0) {
                len = NativeAccess.getLong(info + TRI_LENGTH);
                tag = NativeAccess.getLong(info + TRI_SENDER_TAG);
            }
            engine(userData).requests.completeSlot((int) userData, request, status, len, tag);
        } catch (Throwable t) {
            LOG.error("ucx4j recv callback failed", t);
        }
    }

    static void onStreamRecv(long request, int status, long length, long userData) {
        try {
            engine(userData).requests.completeSlot((int) userData, request, Ucp.status(status), length, 0);
        } catch (Throwable t) {
            LOG.error("ucx4j stream callback failed", t);
        }
    }

    /** {@code ucp_am_recv_callback_t}: arg = AM id << 32 | engine id. Returns a {@code ucs_status_t}. */
    static int onActiveMessage(long arg, long header, long headerLength, long data, long length, long param) {
        long attr = 0;
        try {
            attr = NativeAccess.getLong(param + ARP_RECV_ATTR);
            return REGISTRY[(int) arg].amReceiver.arrived((int) (arg >>> 32), header, headerLength, data, length,
                    attr);
        } catch (Throwable t) {
            LOG.error("ucx4j active message callback failed", t);
            // a rendezvous message nothing kept is refused, so the sender's send fails rather than succeeds for a
            // message the receiver never saw; an eager one may not be refused (UCX asserts it is not), nor one of
            // 0 bytes, which arrived() takes as eager
            return (attr & org.ucx4j.internal.ffi.Structs.UCP_AM_RECV_ATTR_FLAG_RNDV) != 0 && length != 0
                    ? Status.ERR_NO_MEMORY : Status.OK;
        }
    }

    /** {@code ucp_err_handler_cb_t}: arg = engine id << 32 | endpoint slot. */
    static void onEndpointError(long arg, long ep, int status) {
        try {
            engine(arg).connections.endpointError((int) arg, ep, Ucp.status(status));
        } catch (Throwable t) {
            LOG.error("ucx4j endpoint error callback failed", t);
        }
    }
}
