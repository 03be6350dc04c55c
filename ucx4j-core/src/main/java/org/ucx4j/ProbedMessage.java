package org.ucx4j;

import java.util.concurrent.atomic.AtomicBoolean;

/**
 * A tag message found by a probe ({@link Ucx#probe}, {@link Endpoint#probe}): its sender tag and length, known
 * before any buffer is allocated. A <em>removed</em> message has left UCX's queue and belongs to the prober, who
 * must receive it exactly once with {@code recv(ProbedMessage, buffer)}; a peeked one stays queued for any receive.
 */
public final class ProbedMessage {
    private final long handle;
    private final long tag;
    private final long length;
    /** The instance whose worker UCX's handle belongs to: only its receives may take it. */
    private final Ucx ucx;
    private final Endpoint endpoint;
    private final AtomicBoolean taken = new AtomicBoolean();

    ProbedMessage(long handle, long tag, long length, Ucx ucx, Endpoint endpoint) {
        this.handle = handle;
        this.tag = tag;
        this.length = length;
        this.ucx = ucx;
        this.endpoint = endpoint;
    }

    /** {@return the sender's tag: the 63-bit worker-level tag, or for an endpoint probe the 32-bit user tag} */
    public long tag() {
        return tag;
    }

    /** {@return the message's length in bytes} */
    public long length() {
        return length;
    }

    /**
     * {@return true if the probe removed the message from UCX's queue (it must then be received by this handle)}
     */
    public boolean isRemoved() {
        return handle != 0;
    }

    /**
     * Claims the handle for its one receive into {@code capacity} bytes on {@code onUcx} ({@code on}: the endpoint,
     * or null for the worker); a buffer too small is refused before UCX consumes the message, which then stays to be
     * received into a larger one. UCX's handle is a descriptor of the prober's worker: another instance's receive
     * would hand it to a worker that does not own it, so that is refused too.
     */
    long take(Ucx onUcx, Endpoint on, long capacity) {
        if (handle == 0) {
            throw new IllegalStateException("the message was only peeked at: receive it with a normal recv");
        }
        if (onUcx != ucx) {
            throw new IllegalArgumentException("the message was probed on " + ucx + ", not on " + onUcx
                    + ": only the instance that removed it can receive it");
        }
        if (on != endpoint) {
            throw new IllegalArgumentException("the message was probed on " + (endpoint == null ? "the worker"
                    : endpoint) + ", not on " + (on == null ? "the worker" : on));
        }
        if (!taken.compareAndSet(false, true)) {
            throw new IllegalStateException("the probed message was already received");
        }
        if (capacity < length) {
            taken.set(false);
            throw new MessageTruncatedException("probed message of " + length + " bytes refused for a buffer of "
                    + capacity + " bytes; it stays to be received into a larger one ("
                    + org.ucx4j.internal.ffi.Status.name(org.ucx4j.internal.ffi.Status.ERR_MESSAGE_TRUNCATED) + ")",
                    org.ucx4j.internal.ffi.Status.ERR_MESSAGE_TRUNCATED);
        }
        return handle;
    }

    /** Its receive was withdrawn before UCX saw it (timeout, interrupt, cancel): the next receive may take it. */
    void giveBack() {
        taken.set(false);
    }

    @Override
    public String toString() {
        return "ProbedMessage[tag=" + Long.toUnsignedString(tag) + ", " + length + " B"
                + (handle != 0 ? ", removed" : ", peeked") + "]";
    }
}
