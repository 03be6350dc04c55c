package org.ucx4j.internal.engine;

import static org.ucx4j.internal.ffi.Structs.*;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.concurrent.Executor;
import org.ucx4j.internal.ffi.Status;
import org.ucx4j.internal.ffi.Ucp;

/**
 * Sends, puts and gets made inside the caller's own call, on the thread that owns the worker now (its owner, or a
 * thread that borrowed it for the call: {@link Engine#enterCall}): UCX finishes most of them there (short and eager
 * sends, same-host puts and gets), and those need no operation object, no queue and no callback; one UCX does not
 * finish becomes an ordinary operation, completed when a test of its request finds it done (sends) or by its
 * callback (puts and gets). Each method returns {@link #SENT}, that op, or
 * null when it cannot act now (the caller then takes the ordinary path).
 */
public final class InCall {
    private final Engine engine;
    private final OpSlots slots;
    private final MemorySegment reqParam;
    /** Owner thread: staging for short active messages sent inside the call. */
    private final MemorySegment sendScratch;

    InCall(Engine engine, Arena arena) {
        this.engine = engine;
        this.slots = engine.slots;
        this.reqParam = engine.reqParam;
        this.sendScratch = arena.allocate(1024, 16);
    }

    /** What the send-inside-the-call methods return when UCX completed the send there. */
    public static final Op SENT = new Op((Executor) null);

    /**
     * {@code UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL} on sends made inside the call; tests clear it ({@link TestHooks}) to
     * make UCX hand back requests there, as UCX 1.20's stream sends do with the flag set.
     */
    static int sendNowFlag = UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL;

    /**
     * Up to this many bytes {@link #tagSend} asks UCX to finish the send inside the call with its short protocol
     * ({@code FORCE_IMM_CMPL}); above, the send is made as UCX makes any other, and completes in the call when it
     * goes eagerly (UCX still picks its short protocol where that reaches further: over TCP up to ~64 KiB, on shared
     * memory it ends at 93 B with UCX 1.13).
     */
    static final long SHORT_SEND_MAX = 256;

    /**
     * Up to this many bytes a send made inside the call is a critical downcall (no thread-state transition: the
     * transition's fence, right after the copy into a shared-memory FIFO, cost a 1 KiB tag stream ~30 % and a 4 KiB
     * one ~5 % of its bandwidth here), where UCX cannot call back into Java during it: never on an endpoint with a
     * TCP lane ({@link EndpointCore#socketLane}), where a socket error inside the send runs UCX's error handling
     * there, and an upcall inside a critical call aborts the JVM.
     */
    static final long CRITICAL_SEND_MAX = 64 * 1024;

    /** Whether a send of {@code length} bytes on {@code ep} may be a critical downcall (see above). */
    static boolean critical(EndpointCore ep, long length) {
        if (length > CRITICAL_SEND_MAX) {
            return false;
        }
        if (ep.socketLane) {
            TestHooks.socketKeptSendRegular = true; // for tests; only here, off the shared-memory path
            return false;
        }
        // an endpoint to this same worker: should UCX give it the self transport (it does not in 1.13), a send
        // there delivers to the receiving side, callbacks included, inside the call
        return !ep.loopback;
    }

    /**
     * Inside a call {@link Engine#enterCall} opened, on the thread that owns the worker now (the owner, or a borrower):
     * sends a message inside the call. A small one asks UCX to complete it there (its short protocol:
     * {@code UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL}); a larger one is sent as UCX sends any message, which an eager
     * protocol completes in the call, copied (1 KiB-32 KiB on shared memory); a critical downcall where
     * {@link #critical} allows. Returns {@link #SENT}
     * when it completed; null when it cannot act now (UCX said no resource for the short protocol, or refused the
     * send; a thread that does not own the worker, an endpoint that is not open, a flight recording that wants
     * transfers): the caller then takes the ordinary path, which also reports errors; UCX itself tries the short
     * protocol first, so order is kept. A send UCX takes but does not finish inside the call (rendezvous; UCX 1.20
     * stream sends with protocol v2 ignore the flag) hands back a request: the send is in flight and must not be
     * made again, so it becomes the returned op, completed when a test of its request finds it done.
     */
    public Op tagSend(EndpointCore ep, long address, long length, long tag, boolean blocking) {
        if (!engine.ownerMayActNow(ep)) {
            return null;
        }
        int slot = slots.reserve();
        boolean small = length <= SHORT_SEND_MAX;
        engine.setParam(UCP_OP_ATTR_FIELD_MEMORY_TYPE | (small ? sendNowFlag : ep.tagSendAttrs()), 0, 0, 0); // polled
        long r = critical(ep, length) ? Ucp.tagSendCritical(ep.handle, address, length, tag, reqParam.address())
                : Ucp.tagSendNbx(ep.handle, address, length, tag, reqParam.address());
        return Status.isRequest(r) ? polled(engine.tagSend(ep, address, length, tag, 0, blocking), slot, r)
                : sentNow(ep, slot, r, length);
    }

    /** {@link #tagSend} for the stream API. */
    public Op streamSend(EndpointCore ep, long address, long length, boolean blocking) {
        if (!engine.ownerMayActNow(ep)) {
            return null;
        }
        int slot = slots.reserve();
        boolean small = length <= SHORT_SEND_MAX;
        engine.setParam(UCP_OP_ATTR_FIELD_MEMORY_TYPE | (small ? sendNowFlag : 0), 0, 0, 0); // polled: no callback
        long r = critical(ep, length) ? Ucp.streamSendCritical(ep.handle, address, length, reqParam.address())
                : Ucp.streamSendNbx(ep.handle, address, length, reqParam.address());
        return Status.isRequest(r) ? polled(engine.streamSend(ep, address, length, 0, blocking), slot, r)
                : sentNow(ep, slot, r, length);
    }

    /** An active message sent inside the call that UCX did not finish there: the scratch block is its until then. */
    private Op scratchInFlight;

    /**
     * {@link #tagSend} for a plain active message: the wire header (and a heap payload) are staged in the
     * owner's scratch block, which UCX has copied by the time a send it finished in the call returns; one it did not
     * finish keeps the block until it completes (a rendezvous sends the header with its announcement).
     */
    public Op amSend(EndpointCore ep, MemorySegment header, MemorySegment payload, boolean blocking) {
        long prefix = ep.raw ? 0 : AmWire.PREFIX;
        long headerLength = prefix + header.byteSize();
        AmSend.checkHeader(ep, headerLength, AmWire.PLAIN);
        long length = payload.byteSize();
        if (!engine.ownerMayActNow(ep) || headerLength + (payload.isNative() ? 0 : length) > sendScratch.byteSize()) {
            return null;
        }
        if (scratchInFlight != null) {
            if (!scratchInFlight.done) {
                return null;
            }
            scratchInFlight = null;
        }
        if (!ep.raw) {
            AmWire.prefixAt(sendScratch, ep.peerConnId, AmWire.PLAIN);
        }
        MemorySegment.copy(header, 0, sendScratch, prefix, header.byteSize());
        long buffer = payload.address();
        if (!payload.isNative()) {
            MemorySegment.copy(payload, 0, sendScratch, headerLength, length);
            buffer = sendScratch.address() + headerLength;
        }
        int slot = slots.reserve();
        boolean small = headerLength + length <= SHORT_SEND_MAX;
        int flags = small ? 0 : ep.amSendFlags(headerLength, length);
        engine.setParam(UCP_OP_ATTR_FIELD_MEMORY_TYPE | (small ? sendNowFlag : 0) | (flags != 0 ? UCP_OP_ATTR_FIELD_FLAGS
                : 0), 0, 0, flags); // polled: no callback
        int amId = ep.raw ? AmWire.ID_RAW : AmWire.ID_UCX4J;
        long r = critical(ep, headerLength + length) ? Ucp.amSendCritical(ep.handle, amId, sendScratch.address(),
                headerLength, buffer, length, reqParam.address())
                : Ucp.amSendNbx(ep.handle, amId, sendScratch.address(), headerLength, buffer, length,
                        reqParam.address());
        if (!Status.isRequest(r)) {
            return sentNow(ep, slot, r, length);
        }
        // not pooled: scratchInFlight must see this op's own completion, not a later reuse's
        Op op = engine.amSend(ep, amId, sendScratch.address(), headerLength, buffer, length, false, length, 0, false);
        op.blocking = blocking; // a blocking caller parks on it, and must be woken (adopt records the waiter)
        scratchInFlight = op;
        return polled(op, slot, r);
    }

    /**
     * {@link #tagSend} for a put or get, made without {@code FORCE_IMM_CMPL} (UCX 1.13 refuses every get that
     * carries it): UCX finishes a same-host one inside the call (a copy to or from the peer's mapped memory), and
     * one it does not finish comes back as a request, adopted like a send's. Null from a thread that could not
     * borrow the worker, or when UCX refused it at once (the ordinary path then reports the error).
     */
    public Op rma(EndpointCore ep, boolean get, long local, long length, long remoteAddress, long rkey,
            boolean blocking) {
        if (!engine.ownerMayActNow(ep)) {
            return null;
        }
        long startedAt = length >= PeerStats.LARGE ? System.nanoTime() : 0; // for the per-peer bandwidth figures
        int slot = slots.reserve();
        engine.setParam(UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMORY_TYPE,
                Upcalls.SEND.address(), engine.userData(slot), 0);
        long r = get ? Ucp.getNbx(ep.handle, local, length, remoteAddress, rkey, reqParam.address())
                : Ucp.putNbx(ep.handle, local, length, remoteAddress, rkey, reqParam.address());
        if (Status.isRequest(r)) {
            Op op = adopt(engine.rma(ep, get, local, length, remoteAddress, rkey, blocking), slot, r);
            ep.pending.add(op); // as a posted one: failed with its endpoint
            return op;
        }
        slots.release(slot);
        if (r != Status.OK) {
            return null;
        }
        if (get) {
            ep.stats.received(length, startedAt);
        } else {
            ep.stats.sent(length, startedAt);
        }
        return SENT;
    }

    private Op sentNow(EndpointCore ep, int slot, long status, long length) {
        slots.release(slot);
        if (status != Status.OK) {
            return null;
        }
        ep.stats.sent(length, 0);
        return SENT;
    }

    /**
     * {@link #adopt} for a send made without a callback: whoever drives the worker tests its request
     * ({@link Engine#addRingPolled}), a critical downcall, where a callback would be an upcall whose thread
     * transition fences right after the copy the send made (~4 % of a 64 KiB sender's CPU).
     */
    private Op polled(Op op, int slot, long request) {
        adopt(op, slot, request);
        op.polled = true;
        engine.addRingPolled(op);
        return op;
    }

    /**
     * A send, put or get UCX took inside the call but did not finish: {@code op} now owns the request and its slot
     * (which a put's or get's callback names: UCX calls it from a later progress, never from inside that call, which
     * gave a request).
     */
    private Op adopt(Op op, int slot, long request) {
        if (op.blocking) {
            op.waitedBy(engine.owner);
        }
        slots.put(slot, op);
        op.request = request;
        if (op.bytes() >= PeerStats.LARGE) {
            op.startedAt = System.nanoTime();
        }
        return op;
    }
}
