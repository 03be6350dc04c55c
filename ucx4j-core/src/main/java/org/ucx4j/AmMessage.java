package org.ucx4j;

import java.lang.foreign.MemorySegment;
import org.ucx4j.internal.engine.AmData;

/**
 * A received active message: the sender's header and a payload in memory the receiver allocated (see
 * {@link MemoryAllocator}). Close it to give the payload back. {@link #payload()} refuses once closed; a segment
 * kept from before must not be used after {@link #close()} (as with a released Netty buffer). With
 * {@link UcxOptions#withCheckedMessages} such a late access fails cleanly instead (each message then gets its own
 * shared arena, whose close costs tens of microseconds: a debugging aid, not for production rates).
 * <p>
 * With ucx4j's pool as allocator, a payload larger than 32 KiB + 64 B (one shared-memory segment) that UCX
 * assembled from fragments stays in UCX's own buffer (no second copy) and goes back to UCX when the message is
 * closed; such a payload cannot be used after its {@link Ucx} is closed (access then fails with
 * {@link IllegalStateException}). {@link UcxOptions#withUcxBuffers} turns this off.
 */
public final class AmMessage implements AutoCloseable {
    private final AmData data;
    private final Endpoint endpoint;
    /** Only with {@link UcxOptions#withCheckedMessages}: the payload bound to its own arena. */
    private final ReceivedMemory checked;

    AmMessage(AmData data, Endpoint endpoint, boolean checked) {
        this.data = data;
        this.endpoint = endpoint;
        this.checked = checked ? new ReceivedMemory(data) : null;
    }

    /** {@return the sender's header (read-only; heap memory, still readable after {@link #close()})} */
    public MemorySegment header() {
        return MemorySegment.ofArray(data.header()).asReadOnly();
    }

    /** {@return a copy of the sender's header} */
    public byte[] headerBytes() {
        return data.header().clone();
    }

    /**
     * {@return the payload, valid until {@link #close()}}
     *
     * @throws IllegalStateException if the message is closed
     */
    public MemorySegment payload() {
        ReceivedMemory.checkOpen(data, "message is");
        return checked == null ? data.payload() : checked.payload;
    }

    /**
     * {@return a copy of the payload}
     *
     * @throws IllegalStateException if the message is closed
     */
    public byte[] payloadBytes() {
        return payload().toArray(java.lang.foreign.ValueLayout.JAVA_BYTE);
    }

    /** {@return the payload's length in bytes (known after {@link #close()} too)} */
    public long payloadLength() {
        return data.payload().byteSize();
    }

    /** {@return the endpoint it came on, or null when it came from a raw peer ({@link Ucx#amRecv()})} */
    public Endpoint endpoint() {
        return endpoint;
    }

    /**
     * Gives the payload memory back. Idempotent.
     *
     * @throws IllegalStateException with checked messages ({@link UcxOptions#withCheckedMessages}), if the memory is
     *     in use by a native call or an I/O operation right now: it stays open, to be closed again once that ends
     */
    @Override
    public void close() {
        ReceivedMemory.close(data, checked);
    }

    @Override
    public String toString() {
        return "AmMessage[header=" + data.header().length + " B, payload=" + data.payload().byteSize() + " B]";
    }
}
