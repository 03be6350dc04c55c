package org.ucx4j;

import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.List;
import java.util.Objects;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.function.Consumer;
import org.ucx4j.internal.engine.AmSend;
import org.ucx4j.internal.engine.AmWire;
import org.ucx4j.internal.engine.Engine;
import org.ucx4j.internal.engine.EndpointCore;
import org.ucx4j.internal.engine.InCall;
import org.ucx4j.internal.engine.Op;

/**
 * A connection to one peer. Every method is safe from any thread, including many virtual threads at once.
 *
 * <p>Two styles on one engine: {@code *Async} methods return a {@link CompletableFuture} of the byte count;
 * blocking methods park the calling thread (cheap on virtual threads) and never block inside native code. Every
 * blocking call has a {@link Duration} form; on timeout the operation is canceled first (a send that cannot be
 * canceled aborts the endpoint), so no buffer is left in UCX's hands.
 *
 * <p>Tags: {@code send(buf, tag)} and {@code recv(buf, tag)} use this endpoint's private tag space, so two
 * endpoints on one worker never take each other's messages. {@link #sendTagged} sends a 63-bit worker-level tag that
 * the peer receives with {@link Ucx#recvTagged}.
 *
 * <p>Buffers: native {@link MemorySegment}s and direct {@link ByteBuffer}s (between position and limit; the
 * position is not moved) are used in place and must stay valid until the operation completes; {@code byte[]}
 * are copied.
 */
public final class Endpoint implements AutoCloseable {

    private final Ucx ucx;
    private final EndpointCore core;
    private final Engine engine;

    /** The engine's record of this endpoint (tests, through {@code TestHooks}). */
    EndpointCore core() {
        return core;
    }

    Endpoint(Ucx ucx, EndpointCore core) {
        this.ucx = ucx;
        this.core = core;
        this.engine = core.engine();
        core.facade = this;
    }

    // ---------------------------------------------------------------- send

    /**
     * {@link #sendAsync(MemorySegment, int)} with tag 0.
     *
     * @param buf native memory to send, valid and untouched until the future completes
     * @return a future of the number of bytes sent
     */
    public CompletableFuture<Long> sendAsync(MemorySegment buf) {
        return sendAsync(buf, 0);
    }

    /**
     * Sends {@code buf} as one tag message to the peer's endpoint, whose {@link #recv(MemorySegment, int)} with the
     * same {@code tag} receives it. A message small enough may go out inside the call: the future is then already done.
     *
     * @param buf native memory to send, valid and untouched until the future completes
     * @param tag the user tag, any {@code int} (a raw endpoint puts it on the wire zero-extended)
     * @return a future of the number of bytes sent; it completes once UCX is done with {@code buf}, not when the peer
     *     has received it
     */
    public CompletableFuture<Long> sendAsync(MemorySegment buf, int tag) {
        return sendSegmentAsync(Buffers.segment(buf, false), core.sendTag(tag));
    }

    /**
     * {@link #sendAsync(MemorySegment, int)} of a direct buffer's bytes between position and limit (the position is
     * not moved).
     *
     * @param buf direct buffer to send, untouched until the future completes
     * @param tag the user tag
     * @return a future of the number of bytes sent
     */
    public CompletableFuture<Long> sendAsync(ByteBuffer buf, int tag) {
        return sendAsync(Buffers.segment(buf, false), tag);
    }

    /**
     * {@link #sendAsync(MemorySegment, int)} of a copy of {@code buf}, which may be reused at once.
     *
     * @param buf the bytes to send (copied)
     * @param tag the user tag
     * @return a future of the number of bytes sent
     */
    public CompletableFuture<Long> sendAsync(byte[] buf, int tag) {
        ucx.checkOpen();
        long copy = Buffers.copyIn(buf);
        Op op = engine.tagSend(core, copy, buf.length, core.sendTag(tag), copy, false);
        engine.submit(op);
        return op;
    }

    /**
     * {@link #send(MemorySegment, int)} with tag 0.
     *
     * @param buf native memory to send
     */
    public void send(MemorySegment buf) {
        send(buf, 0);
    }

    /**
     * {@link #sendAsync(MemorySegment, int)}, waiting until UCX is done with {@code buf} (not until the peer has
     * received it).
     *
     * @param buf native memory to send
     * @param tag the user tag, any {@code int}
     */
    public void send(MemorySegment buf, int tag) {
        sendSegment(Buffers.segment(buf, false), core.sendTag(tag), -1);
    }

    /**
     * {@link #send(MemorySegment, int)} within {@code timeout}.
     *
     * @param buf native memory to send
     * @param tag the user tag
     * @param timeout the longest wait; past it {@link UcxTimeoutException}, and a send UCX already holds
     *     aborts the endpoint
     */
    public void send(MemorySegment buf, int tag, Duration timeout) {
        long t = Buffers.nanos(timeout);
        sendSegment(Buffers.segment(buf, false), core.sendTag(tag), t);
    }

    /**
     * {@link #send(ByteBuffer, int)} with tag 0.
     *
     * @param buf direct buffer to send
     */
    public void send(ByteBuffer buf) {
        send(Buffers.segment(buf, false), 0);
    }

    /**
     * {@link #send(MemorySegment, int)} of a direct buffer's bytes between position and limit (the position is not
     * moved).
     *
     * @param buf direct buffer to send
     * @param tag the user tag
     */
    public void send(ByteBuffer buf, int tag) {
        send(Buffers.segment(buf, false), tag);
    }

    /**
     * {@link #send(ByteBuffer, int)} within {@code timeout}.
     *
     * @param buf direct buffer to send
     * @param tag the user tag
     * @param timeout the longest wait; past it {@link UcxTimeoutException}, and a send UCX already holds
     *     aborts the endpoint
     */
    public void send(ByteBuffer buf, int tag, Duration timeout) {
        send(Buffers.segment(buf, false), tag, timeout);
    }

    /**
     * {@link #send(byte[], int)} with tag 0.
     *
     * @param buf the bytes to send (copied)
     */
    public void send(byte[] buf) {
        send(buf, 0);
    }

    /**
     * {@link #send(MemorySegment, int)} of a copy of {@code buf}.
     *
     * @param buf the bytes to send (copied)
     * @param tag the user tag
     */
    public void send(byte[] buf, int tag) {
        ucx.checkOpen(); // before the copy, as the other forms
        long copy = Buffers.copyIn(buf);
        sendBlocking(engine.tagSend(core, copy, buf.length, core.sendTag(tag), copy, true), -1);
    }

    /**
     * {@link #send(byte[], int)} within {@code timeout}.
     *
     * @param buf the bytes to send (copied)
     * @param tag the user tag
     * @param timeout the longest wait; past it {@link UcxTimeoutException}, and a send UCX already holds
     *     aborts the endpoint
     */
    public void send(byte[] buf, int tag, Duration timeout) {
        long t = Buffers.nanos(timeout);
        ucx.checkOpen();
        long copy = Buffers.copyIn(buf);
        sendBlocking(engine.tagSend(core, copy, buf.length, core.sendTag(tag), copy, true), t);
    }

    /**
     * Sends with a worker-level tag (0 .. 2^63-1), received by the peer's {@link Ucx#recvTagged}.
     *
     * @param buf native memory to send, valid and untouched until the future completes
     * @param tag the worker-level tag, 0 .. 2^63-1 ({@link IllegalArgumentException} if negative)
     * @return a future of the number of bytes sent
     */
    public CompletableFuture<Long> sendTaggedAsync(MemorySegment buf, long tag) {
        return sendSegmentAsync(Buffers.segment(buf, false), workerTag(tag));
    }

    /**
     * {@link #sendTaggedAsync(MemorySegment, long)}, waiting until UCX is done with {@code buf}.
     *
     * @param buf native memory to send
     * @param tag the worker-level tag, 0 .. 2^63-1
     */
    public void sendTagged(MemorySegment buf, long tag) {
        sendSegment(Buffers.segment(buf, false), workerTag(tag), -1);
    }

    /**
     * {@link #sendTagged(MemorySegment, long)} within {@code timeout}.
     *
     * @param buf native memory to send
     * @param tag the worker-level tag, 0 .. 2^63-1
     * @param timeout the longest wait; past it {@link UcxTimeoutException}, and a send UCX already holds
     *     aborts the endpoint
     */
    public void sendTagged(MemorySegment buf, long tag, Duration timeout) {
        long t = Buffers.nanos(timeout);
        sendSegment(Buffers.segment(buf, false), workerTag(tag), t);
    }

    /**
     * {@link #sendTagged(MemorySegment, long)} of a copy of {@code buf}.
     *
     * @param buf the bytes to send (copied)
     * @param tag the worker-level tag, 0 .. 2^63-1
     */
    public void sendTagged(byte[] buf, long tag) {
        sendTagged(buf, tag, -1);
    }

    /**
     * {@link #sendTagged(byte[], long)} within {@code timeout} (as a timed-out send, it aborts the endpoint).
     *
     * @param buf the bytes to send (copied)
     * @param tag the worker-level tag, 0 .. 2^63-1
     * @param timeout the longest wait; past it {@link UcxTimeoutException}
     */
    public void sendTagged(byte[] buf, long tag, Duration timeout) {
        sendTagged(buf, tag, Buffers.nanos(timeout));
    }

    private void sendTagged(byte[] buf, long tag, long timeoutNanos) {
        long wt = workerTag(tag);
        ucx.checkOpen();
        long copy = Buffers.copyIn(buf);
        sendBlocking(engine.tagSend(core, copy, buf.length, wt, copy, true), timeoutNanos);
    }

    private CompletableFuture<Long> sendSegmentAsync(MemorySegment seg, long wireTag) {
        Op op = startTagSend(seg, wireTag, false, Long.MAX_VALUE);
        return op == InCall.SENT ? engine.completed(seg.byteSize()) : op;
    }

    private void sendSegment(MemorySegment seg, long wireTag, long timeoutNanos) {
        long deadline = engine.deadline(timeoutNanos);
        Op op = startTagSend(seg, wireTag, true, deadline);
        if (op != InCall.SENT) {
            engine.await(op, timeoutNanos, deadline);
        }
    }

    /**
     * Starts a tag send. On the worker's owner thread (caller-driven mode), or on a thread that borrows the worker
     * for the call ({@link Engine#enterCall}: a blocking call waits for it, an asynchronous one takes it only if
     * nobody drives it), a message small enough for UCX's short protocol is sent inside the call without an
     * operation object ({@link InCall#SENT}; the async form then hands back a shared completed future), and a
     * larger one is posted by this thread; otherwise its op goes to the worker's thread through the queue.
     */
    private Op startTagSend(MemorySegment seg, long wireTag, boolean blocking, long deadline) {
        ucx.checkOpen();
        boolean borrowed = engine.enterCall(core, blocking, deadline, "tag send");
        Op op = null;
        try {
            Op now = engine.inCall.tagSend(core, seg.address(), seg.byteSize(), wireTag, blocking);
            op = now == InCall.SENT ? now : now != null ? kept(now, seg) // in flight after all
                    : submitted(kept(engine.tagSend(core, seg.address(), seg.byteSize(), wireTag, 0, blocking), seg));
            return op;
        } finally {
            engine.leaveCall(borrowed, blocking && op != InCall.SENT ? op : null); // it waits for op next
        }
    }

    private void sendBlocking(Op op, long timeoutNanos) {
        engine.submit(op);
        engine.await(op, timeoutNanos);
    }

    static long workerTag(long tag) {
        if (tag < 0) { // bit 63 set
            throw new IllegalArgumentException("worker-level tags are 0 .. 2^63-1 (bit 63 marks endpoint-private "
                    + "tags), got " + Long.toUnsignedString(tag));
        }
        return tag;
    }

    // ---------------------------------------------------------------- receive

    /**
     * {@link #recvAsync(MemorySegment, int)} with tag 0.
     *
     * @param buf native memory to receive into, valid until the future completes
     * @return a future of the message's length in bytes
     */
    public CompletableFuture<Long> recvAsync(MemorySegment buf) {
        return recvAsync(buf, 0);
    }

    /**
     * Receives the next message the peer sent to this endpoint with {@code tag}; completes with its length.
     *
     * <p>Messages the peer sent before it closed gracefully are still received after its close ended this
     * endpoint, until this side closes it (a rendezvous-size message the peer closed without waiting for is not:
     * its bytes went with the peer); with none waiting, the receive fails with {@link ConnectionResetException}.
     *
     * @param buf native memory to receive into, valid until the future completes
     * @param tag the user tag the peer sent with
     * @return a future of the message's length in bytes; it fails with {@link MessageTruncatedException} if the
     *     message is longer than {@code buf}
     */
    public CompletableFuture<Long> recvAsync(MemorySegment buf, int tag) {
        Op op = recvOp(Buffers.segment(buf, true), core.recvTag(tag), false);
        engine.submit(op);
        return op;
    }

    /**
     * {@link #recvAsync(MemorySegment, int)} into a direct buffer, between position and limit (the position is not
     * moved).
     *
     * @param buf writable direct buffer to receive into, valid until the future completes
     * @param tag the user tag the peer sent with
     * @return a future of the message's length in bytes
     */
    public CompletableFuture<Long> recvAsync(ByteBuffer buf, int tag) {
        return recvAsync(Buffers.segment(buf, true), tag);
    }

    /**
     * {@link #recvAsync(MemorySegment, int)} into an array, by way of a native copy.
     *
     * @param buf the array to receive into; it holds the message once the future has completed
     * @param tag the user tag the peer sent with
     * @return a future of the message's length in bytes
     */
    public CompletableFuture<Long> recvAsync(byte[] buf, int tag) {
        ucx.checkOpen();
        long staging = Buffers.staging(buf);
        Op op = engine.tagRecv(core, staging, buf.length, core.recvTag(tag), -1L, staging, buf, false);
        engine.submit(op);
        return op;
    }

    /**
     * {@return the length of one message (tag 0), received into {@code buf}} Throws
     * {@link MessageTruncatedException} if larger.
     *
     * @param buf native memory to receive into
     */
    public long recv(MemorySegment buf) {
        return recv(buf, 0);
    }

    /**
     * {@link #recvAsync(MemorySegment, int)}, waiting for the message.
     *
     * @param buf native memory to receive into
     * @param tag the user tag the peer sent with
     * @return the message's length in bytes ({@link MessageTruncatedException} if it is longer than {@code buf})
     */
    public long recv(MemorySegment buf, int tag) {
        return recvBlocking(Buffers.segment(buf, true), tag, -1);
    }

    /**
     * {@link #recv(MemorySegment, int)} within {@code timeout}.
     *
     * @param buf native memory to receive into
     * @param tag the user tag the peer sent with
     * @param timeout the longest wait; past it {@link UcxTimeoutException}
     * @return the message's length in bytes
     */
    public long recv(MemorySegment buf, int tag, Duration timeout) {
        long t = Buffers.nanos(timeout);
        return recvBlocking(Buffers.segment(buf, true), tag, t);
    }

    /** The owner thread takes a message that already waits inside the call; otherwise a receive op waits. */
    private long recvBlocking(MemorySegment seg, int tag, long timeoutNanos) {
        long wireTag = core.recvTag(tag);
        long deadline = engine.deadline(timeoutNanos);
        long n = engine.tagRecvNow(core, seg.address(), seg.byteSize(), wireTag, timeoutNanos, deadline);
        if (n >= 0) {
            return n;
        }
        Op op = recvOp(seg, wireTag, true);
        engine.submit(op);
        return engine.await(op, Engine.timeLeft(timeoutNanos, deadline)); // a borrow that failed took its time
    }

    /**
     * {@link #recv(ByteBuffer, int)} with tag 0.
     *
     * @param buf writable direct buffer to receive into
     * @return the message's length in bytes
     */
    public long recv(ByteBuffer buf) {
        return recv(Buffers.segment(buf, true), 0);
    }

    /**
     * {@link #recv(MemorySegment, int)} into a direct buffer, between position and limit (the position is not moved).
     *
     * @param buf writable direct buffer to receive into
     * @param tag the user tag the peer sent with
     * @return the message's length in bytes
     */
    public long recv(ByteBuffer buf, int tag) {
        return recv(Buffers.segment(buf, true), tag);
    }

    /**
     * {@link #recv(ByteBuffer, int)} within {@code timeout}.
     *
     * @param buf writable direct buffer to receive into
     * @param tag the user tag the peer sent with
     * @param timeout the longest wait; past it {@link UcxTimeoutException}
     * @return the message's length in bytes
     */
    public long recv(ByteBuffer buf, int tag, Duration timeout) {
        return recv(Buffers.segment(buf, true), tag, timeout);
    }

    /**
     * {@link #recv(byte[], int)} with tag 0.
     *
     * @param buf the array to receive into
     * @return the message's length in bytes
     */
    public long recv(byte[] buf) {
        return recv(buf, 0);
    }

    /**
     * {@link #recv(MemorySegment, int)} into an array, by way of a native copy.
     *
     * @param buf the array to receive into
     * @param tag the user tag the peer sent with
     * @return the message's length in bytes
     */
    public long recv(byte[] buf, int tag) {
        return recvBytes(buf, tag, -1);
    }

    /**
     * {@link #recv(byte[], int)} within {@code timeout}.
     *
     * @param buf the array to receive into
     * @param tag the user tag the peer sent with
     * @param timeout the longest wait; past it {@link UcxTimeoutException}
     * @return the message's length in bytes
     */
    public long recv(byte[] buf, int tag, Duration timeout) {
        return recvBytes(buf, tag, Buffers.nanos(timeout));
    }

    private long recvBytes(byte[] buf, int tag, long timeoutNanos) {
        ucx.checkOpen();
        long staging = Buffers.staging(buf);
        Op op = engine.tagRecv(core, staging, buf.length, core.recvTag(tag), -1L, staging, buf, true);
        engine.submit(op);
        return engine.await(op, timeoutNanos);
    }

    private Op recvOp(MemorySegment seg, long wireTag, boolean blocking) {
        ucx.checkOpen();
        Op op = engine.tagRecv(core, seg.address(), seg.byteSize(), wireTag, -1L, 0, null, blocking);
        Ucx.keepAlive(op, seg);
        return op;
    }

    /**
     * Looks for a message the peer sent to this endpoint with {@code tag}, without receiving it; null if none has
     * arrived. With {@code remove} the message leaves UCX's queue and must be received with
     * {@link #recv(ProbedMessage, MemorySegment)}; otherwise it stays for any receive.
     *
     * @param tag the user tag the peer sent with
     * @param remove whether to take the message out of UCX's queue
     * @return the message's tag and length, or null if none has arrived
     */
    public ProbedMessage probe(int tag, boolean remove) {
        ucx.checkOpen();
        long[] r = engine.tagProbe(core.recvTag(tag), -1L, remove);
        return r == null ? null : new ProbedMessage(r[0], r[1] & 0xffffffffL, r[2], ucx, this);
    }

    /**
     * {@return the length of a message a removing {@link #probe} took, once received into {@code buf}}
     *
     * @param message a message removed by this endpoint's probe, received once only ({@link IllegalStateException}
     *     if it was only peeked at or was received already)
     * @param buf native memory to receive into, with room for {@code message.length()} bytes (a smaller one is
     *     refused with {@link MessageTruncatedException} and the message stays, to be received into a larger one)
     */
    public long recv(ProbedMessage message, MemorySegment buf) {
        return engine.await(submitted(probedOp(message, buf, true)), -1);
    }

    /**
     * {@link #recv(ProbedMessage, MemorySegment)} within {@code timeout}.
     *
     * @param message a message removed by this endpoint's probe
     * @param buf native memory to receive into
     * @param timeout the longest wait; past it {@link UcxTimeoutException}
     * @return the message's length in bytes
     */
    public long recv(ProbedMessage message, MemorySegment buf, Duration timeout) {
        long t = Buffers.nanos(timeout);
        return engine.await(submitted(probedOp(message, buf, true)), t);
    }

    /**
     * {@link #recv(ProbedMessage, MemorySegment)} without waiting.
     *
     * @param message a message removed by this endpoint's probe
     * @param buf native memory to receive into, valid until the future completes
     * @return a future of the message's length in bytes
     */
    public CompletableFuture<Long> recvAsync(ProbedMessage message, MemorySegment buf) {
        return submitted(probedOp(message, buf, false));
    }

    private Op probedOp(ProbedMessage message, MemorySegment buf, boolean blocking) {
        MemorySegment seg = Buffers.segment(buf, true);
        Objects.requireNonNull(message, "message");
        ucx.checkOpen();
        if (blocking) { // refused before the message is claimed: it stays for a try from elsewhere
            engine.checkMayBlock("recv");
        }
        Op op = engine.probedRecv(core, message.take(ucx, this, seg.byteSize()), message.tag(), message.length(),
                seg.address(), seg.byteSize(), 0, null, blocking);
        op.onWithdrawn(message::giveBack); // withdrawn before UCX saw it: the message waits for the next try
        Ucx.keepAlive(op, seg);
        return op;
    }

    // ---------------------------------------------------------------- stream

    /**
     * Sends bytes on the endpoint's ordered byte stream (UCX stream API: no message boundaries, no tags). Completes
     * with the byte count. A timed-out or canceled stream operation that UCX already holds aborts the endpoint, since
     * UCX cannot withdraw it (one still waiting to reach UCX is simply withdrawn, its endpoint intact).
     *
     * @param buf native memory to send, valid and untouched until the future completes
     * @return a future of the number of bytes sent
     */
    public CompletableFuture<Long> streamSendAsync(MemorySegment buf) {
        MemorySegment seg = Buffers.segment(buf, false);
        Op op = startStreamSend(seg, false, Long.MAX_VALUE);
        return op == InCall.SENT ? engine.completed(seg.byteSize()) : op;
    }

    /**
     * {@link #streamSendAsync(MemorySegment)}, waiting until UCX is done with {@code buf}.
     *
     * @param buf native memory to send
     */
    public void streamSend(MemorySegment buf) {
        streamSend(buf, -1);
    }

    /**
     * {@link #streamSend(MemorySegment)} within {@code timeout} (as a timed-out stream send, it aborts the endpoint
     * once UCX holds it).
     *
     * @param buf native memory to send
     * @param timeout the longest wait; past it {@link UcxTimeoutException}
     */
    public void streamSend(MemorySegment buf, Duration timeout) {
        streamSend(buf, Buffers.nanos(timeout));
    }

    private void streamSend(MemorySegment buf, long t) {
        MemorySegment seg = Buffers.segment(buf, false);
        long deadline = engine.deadline(t);
        Op op = startStreamSend(seg, true, deadline);
        if (op != InCall.SENT) {
            engine.await(op, t, deadline);
        }
    }

    /** Starts a stream send, as {@link #startTagSend} does a tag send. */
    private Op startStreamSend(MemorySegment seg, boolean blocking, long deadline) {
        ucx.checkOpen();
        boolean borrowed = engine.enterCall(core, blocking, deadline, "stream send");
        Op op = null;
        try {
            Op now = engine.inCall.streamSend(core, seg.address(), seg.byteSize(), blocking);
            op = now == InCall.SENT ? now : now != null ? kept(now, seg) // in flight after all
                    : submitted(kept(engine.streamSend(core, seg.address(), seg.byteSize(), 0, blocking), seg));
            return op;
        } finally {
            engine.leaveCall(borrowed, blocking && op != InCall.SENT ? op : null); // it waits for op next
        }
    }

    /**
     * {@link #streamSend(MemorySegment)} of a copy of {@code buf}.
     *
     * @param buf the bytes to send (copied)
     */
    public void streamSend(byte[] buf) {
        streamSend(buf, -1);
    }

    /**
     * {@link #streamSend(byte[])} within {@code timeout} (as a timed-out stream send, it aborts the endpoint once
     * UCX holds it).
     *
     * @param buf the bytes to send (copied)
     * @param timeout the longest wait; past it {@link UcxTimeoutException}
     */
    public void streamSend(byte[] buf, Duration timeout) {
        streamSend(buf, Buffers.nanos(timeout));
    }

    private void streamSend(byte[] buf, long timeoutNanos) {
        ucx.checkOpen();
        long copy = Buffers.copyIn(buf);
        Op op = engine.streamSend(core, copy, buf.length, copy, true);
        engine.submit(op);
        engine.await(op, timeoutNanos);
    }

    /**
     * Receives exactly {@code buf.byteSize()} stream bytes.
     *
     * <p>Once the peer has closed gracefully, the bytes it streamed before are still received, as a socket's reads
     * go on after its peer's FIN, until this side closes the endpoint; a receive that asks for more than is left
     * then fails with {@link ConnectionResetException} and leaves those bytes to {@link #streamRecvSomeAsync}.
     *
     * @param buf native memory to fill, at least one byte ({@link IllegalArgumentException} if empty), valid until
     *     the future completes
     * @return a future of the number of bytes received, {@code buf.byteSize()}
     */
    public CompletableFuture<Long> streamRecvAsync(MemorySegment buf) {
        return streamRecvOp(buf, true, false);
    }

    /**
     * Receives whatever stream bytes are available, at least one, at most {@code buf.byteSize()}; returns the
     * count. After the peer's graceful close, it takes what the peer streamed before, then fails with
     * {@link ConnectionResetException} (the end of the stream).
     *
     * @param buf native memory to receive into, at least one byte, valid until the future completes
     * @return a future of the number of bytes received
     */
    public CompletableFuture<Long> streamRecvSomeAsync(MemorySegment buf) {
        return streamRecvOp(buf, false, false);
    }

    /**
     * Receives exactly {@code buf.byteSize()} stream bytes.
     *
     * @param buf native memory to fill, at least one byte ({@link IllegalArgumentException} if empty)
     * @return the number of bytes received, {@code buf.byteSize()}
     */
    public long streamRecv(MemorySegment buf) {
        return engine.await(streamRecvOp(buf, true, true), -1);
    }

    /**
     * {@link #streamRecv(MemorySegment)} within {@code timeout} (as a timed-out stream receive, it aborts the
     * endpoint).
     *
     * @param buf native memory to fill, at least one byte
     * @param timeout the longest wait; past it {@link UcxTimeoutException}
     * @return the number of bytes received, {@code buf.byteSize()}
     */
    public long streamRecv(MemorySegment buf, Duration timeout) {
        long t = Buffers.nanos(timeout);
        return engine.await(streamRecvOp(buf, true, true), t);
    }

    /**
     * {@return the count of whatever stream bytes are available (at least one), received into {@code buf}}
     *
     * @param buf native memory to receive into, at least one byte; at most {@code buf.byteSize()} are received
     */
    public long streamRecvSome(MemorySegment buf) {
        return engine.await(streamRecvOp(buf, false, true), -1);
    }

    /**
     * {@link #streamRecvSome(MemorySegment)} within {@code timeout} (as a timed-out stream receive, it aborts the
     * endpoint).
     *
     * @param buf native memory to receive into, at least one byte
     * @param timeout the longest wait; past it {@link UcxTimeoutException}
     * @return the number of bytes received
     */
    public long streamRecvSome(MemorySegment buf, Duration timeout) {
        long t = Buffers.nanos(timeout);
        return engine.await(streamRecvOp(buf, false, true), t);
    }

    /**
     * Receives exactly {@code buf.length} stream bytes into the array.
     *
     * @param buf the array to fill, at least one byte long ({@link IllegalArgumentException} if empty)
     * @return the number of bytes received, {@code buf.length}
     */
    public long streamRecv(byte[] buf) {
        return streamRecv(buf, -1);
    }

    /**
     * {@link #streamRecv(byte[])} within {@code timeout} (as a timed-out stream receive, it aborts the endpoint once
     * UCX holds it).
     *
     * @param buf the array to fill, at least one byte long
     * @param timeout the longest wait; past it {@link UcxTimeoutException}
     * @return the number of bytes received, {@code buf.length}
     */
    public long streamRecv(byte[] buf, Duration timeout) {
        return streamRecv(buf, Buffers.nanos(timeout));
    }

    private long streamRecv(byte[] buf, long timeoutNanos) {
        ucx.checkOpen();
        if (Objects.requireNonNull(buf, "buffer").length == 0) {
            throw new IllegalArgumentException("a stream receive needs room for at least one byte");
        }
        long staging = Buffers.staging(buf);
        Op op = engine.streamRecv(core, staging, buf.length, true, staging, buf, true);
        engine.submit(op);
        return engine.await(op, timeoutNanos);
    }

    private Op streamRecvOp(MemorySegment buf, boolean waitAll, boolean blocking) {
        MemorySegment seg = Buffers.segment(buf, true);
        if (seg.byteSize() == 0) {
            throw new IllegalArgumentException("a stream receive needs room for at least one byte");
        }
        ucx.checkOpen();
        Op op = engine.streamRecv(core, seg.address(), seg.byteSize(), waitAll, 0, null, blocking);
        Ucx.keepAlive(op, seg);
        engine.submit(op);
        return op;
    }

    // ---------------------------------------------------------------- active messages

    /**
     * Sends an active message: a small user header (copied) and a payload the receiver allocates memory for
     * ({@link #amRecv()}); large payloads go by rendezvous straight into that memory. A native payload is sent in
     * place and must stay valid until completion; a heap payload is copied. On a raw endpoint the header goes on
     * the wire exactly as given, with UCX AM id 0.
     *
     * @param header the user header, at most {@link Ucx#maxActiveMessageHeader()} bytes
     *     ({@link IllegalArgumentException} if longer)
     * @param payload the payload: native memory, valid and untouched until the future completes, or heap memory
     * @return a future of the payload's size in bytes
     */
    public CompletableFuture<Long> amSendAsync(MemorySegment header, MemorySegment payload) {
        Op op = startAmSend(header, payload, false, Long.MAX_VALUE);
        return op == InCall.SENT ? engine.completed(payload.byteSize()) : op;
    }

    /**
     * {@link #amSendAsync(MemorySegment, MemorySegment)}, waiting until UCX is done with the payload.
     *
     * @param header the user header (copied)
     * @param payload the payload, native (sent in place) or heap (copied)
     */
    public void amSend(MemorySegment header, MemorySegment payload) {
        amSend(header, payload, -1);
    }

    /**
     * {@link #amSend(MemorySegment, MemorySegment)} within {@code timeout}.
     *
     * @param header the user header (copied)
     * @param payload the payload, native (sent in place) or heap (copied)
     * @param timeout the longest wait; past it {@link UcxTimeoutException}, and a send UCX already holds
     *     aborts the endpoint
     */
    public void amSend(MemorySegment header, MemorySegment payload, Duration timeout) {
        amSend(header, payload, Buffers.nanos(timeout));
    }

    private void amSend(MemorySegment header, MemorySegment payload, long timeoutNanos) {
        long deadline = engine.deadline(timeoutNanos);
        Op op = startAmSend(header, payload, true, deadline);
        if (op != InCall.SENT) {
            engine.await(op, timeoutNanos, deadline);
        }
    }

    /**
     * Starts an active message, as {@link #startTagSend} does a tag send: a short one goes out inside the call
     * where this thread owns (or borrows) the worker ({@link InCall#SENT}).
     */
    private Op startAmSend(MemorySegment header, MemorySegment payload, boolean blocking, long deadline) {
        Buffers.alive(Objects.requireNonNull(header, "header"));
        Buffers.alive(Objects.requireNonNull(payload, "payload"));
        ucx.checkOpen();
        boolean borrowed = engine.enterCall(core, blocking, deadline, "active message send");
        Op op = null;
        try {
            Op now = engine.inCall.amSend(core, header, payload, blocking);
            op = now == InCall.SENT ? now : now != null ? kept(now, payload) : submitted(amOp(header, payload,
                    blocking));
            return op;
        } finally {
            engine.leaveCall(borrowed, blocking && op != InCall.SENT ? op : null); // it waits for op next
        }
    }

    /**
     * {@link #amSend(MemorySegment, MemorySegment)} of arrays, which are copied.
     *
     * @param header the user header (copied)
     * @param payload the payload (copied)
     */
    public void amSend(byte[] header, byte[] payload) {
        amSend(MemorySegment.ofArray(Objects.requireNonNull(header, "header")),
                MemorySegment.ofArray(Objects.requireNonNull(payload, "payload")));
    }

    /**
     * {@link #amSend(byte[], byte[])} within {@code timeout} (as a timed-out send, it aborts the endpoint).
     *
     * @param header the user header (copied)
     * @param payload the payload (copied)
     * @param timeout the longest wait; past it {@link UcxTimeoutException}
     */
    public void amSend(byte[] header, byte[] payload, Duration timeout) {
        amSend(MemorySegment.ofArray(Objects.requireNonNull(header, "header")),
                MemorySegment.ofArray(Objects.requireNonNull(payload, "payload")), timeout);
    }

    /**
     * Hands every active message of this endpoint to {@code handler} as it lands, on the thread driving the worker
     * (its progress thread, or a thread that borrowed the worker for a blocking call), in arrival order, instead
     * of keeping it for {@link #amRecv()}; messages that arrived earlier go first. Saves the hand-off to a
     * receiving thread (UCXX's AM receiver callback), for code that owns its latency: the handler must be quick
     * and must never block, since the worker makes no progress meanwhile. It may keep the message and close it
     * later from any thread; the async methods it calls start without a hand-off. If it throws, the error is
     * logged and the message closed (with {@link UcxOptions#withCheckedMessages}, a payload that an I/O operation
     * the handler started still uses stays open until the message is closed again). Set once; afterwards
     * {@code amRecv} fails with {@link IllegalStateException}, and so do receives that were waiting. A failed
     * endpoint reports through {@link #onClose}.
     *
     * @param handler takes each message, which it closes (at once or later) to give its memory back
     * @throws IllegalStateException if the endpoint already has a handler, or is a raw endpoint
     */
    public void onActiveMessage(java.util.function.Consumer<AmMessage> handler) {
        Objects.requireNonNull(handler, "handler");
        ucx.checkOpen();
        if (core.isRaw()) { // before the claim: the endpoint is left as it was
            throw new IllegalStateException("a raw endpoint's peer sends plain UCX active messages, which carry no "
                    + "ucx4j connection to tell its endpoint by: handle them with Ucx.amRecv()");
        }
        if (!core.claimAmHandler()) {
            throw new IllegalStateException("this endpoint already has an active-message handler");
        }
        boolean checked = ucx.options().checkedMessages();
        engine.setAmHandler(core, d -> {
            AmMessage m = new AmMessage(d, this, checked);
            try {
                handler.accept(m);
            } catch (Throwable t) {
                try {
                    m.close(); // through its checked arena, if any: a payload segment the handler kept fails cleanly
                } catch (IllegalStateException inUse) {
                    // checked, and the handler left an I/O operation on the payload: the arena keeps the memory
                    // until the message is closed again (by whoever kept it), never given back under that operation
                    t.addSuppressed(inUse);
                }
                throw t;
            }
        }, handlerSet());
    }

    private static IllegalStateException handlerSet() {
        return org.ucx4j.internal.engine.EndpointCore.handlerSet();
    }

    private void checkNoHandler() {
        if (core.hasAmHandler()) {
            throw handlerSet();
        }
    }

    /**
     * {@return a future of the next active message the peer sent to this endpoint (in arrival order), in
     * receiver-allocated memory} Close the message to give that memory back.
     *
     * @throws IllegalStateException if the endpoint has an {@linkplain #onActiveMessage handler}
     */
    public CompletableFuture<AmMessage> amRecvAsync() {
        ucx.checkOpen();
        checkNoHandler();
        boolean checked = ucx.options().checkedMessages();
        return Ucx.adapt(engine.amTake(core, AmWire.PLAIN), d -> new AmMessage(d, this, checked), true, false);
    }

    /**
     * {@link #amRecvAsync()}, waiting for the message.
     *
     * @return the message, in receiver-allocated memory that closing it gives back
     * @throws IllegalStateException if the endpoint has an {@linkplain #onActiveMessage handler}
     */
    public AmMessage amRecv() {
        checkNoHandler();
        return new AmMessage(message(AmWire.PLAIN, -1, "active message receive"), this,
                ucx.options().checkedMessages());
    }

    /**
     * {@link #amRecv()} within {@code timeout}.
     *
     * @param timeout the longest wait; past it {@link UcxTimeoutException}
     * @return the message, in receiver-allocated memory that closing it gives back
     */
    public AmMessage amRecv(Duration timeout) {
        long t = Buffers.nanos(timeout);
        checkNoHandler();
        return new AmMessage(message(AmWire.PLAIN, t, "active message receive"), this,
                ucx.options().checkedMessages());
    }

    private Op amOp(MemorySegment header, MemorySegment payload, boolean blocking) {
        Objects.requireNonNull(header, "header");
        Objects.requireNonNull(payload, "payload");
        ucx.checkOpen();
        Op op = AmSend.message(core, header, payload, blocking);
        Ucx.keepAlive(op, payload);
        return op;
    }

    private Op submitted(Op op) {
        engine.submit(op);
        return op;
    }

    /** {@code op}, with {@code buffer} kept reachable until it completes. */
    private static Op kept(Op op, Object buffer) {
        Ucx.keepAlive(op, buffer);
        return op;
    }

    /** The next message of {@code kind}: see {@link org.ucx4j.internal.engine.Engine#amTakeBlocking}. */
    private Object take(byte kind, long timeoutNanos, String what) {
        ucx.checkOpen();
        return engine.amTakeBlocking(core, kind, timeoutNanos, what);
    }

    /** {@link #take} of a kind that always arrives as a message (not an object's bare array). */
    private org.ucx4j.internal.engine.AmData message(byte kind, long timeoutNanos, String what) {
        return (org.ucx4j.internal.engine.AmData) take(kind, timeoutNanos, what);
    }

    // ---------------------------------------------------------------- frames and objects

    /**
     * Sends several buffers as one message (Dask's framing, UCXX's {@code send_multi}): a header with the frame
     * count, sizes and memory types, then the frames gathered in one transfer. The receiver allocates once and gets
     * them back as {@link Frames}. Native frames are sent in place; heap frames are copied.
     *
     * @param frames the frames; native ones valid and untouched until the future completes
     * @return a future of the frames' total size in bytes
     * @throws IllegalArgumentException with more frames than {@link UcxOptions#withMaxFrames} allows
     */
    public CompletableFuture<Long> sendFramesAsync(List<MemorySegment> frames) {
        Op op = framesOp(frames, false);
        engine.submit(op);
        return op;
    }

    /**
     * {@link #sendFramesAsync(List)}, waiting until UCX is done with the frames.
     *
     * @param frames the frames, native (sent in place) or heap (copied)
     */
    public void sendFrames(List<MemorySegment> frames) {
        engine.await(submitted(framesOp(frames, true)), -1);
    }

    /**
     * {@link #sendFrames(List)} within {@code timeout}.
     *
     * @param frames the frames, native (sent in place) or heap (copied)
     * @param timeout the longest wait; past it {@link UcxTimeoutException}, and a send UCX already holds
     *     aborts the endpoint
     */
    public void sendFrames(List<MemorySegment> frames, Duration timeout) {
        long t = Buffers.nanos(timeout);
        engine.await(submitted(framesOp(frames, true)), t);
    }

    /**
     * {@return a future of the next multi-frame message} It fails with {@link MessageRefusedException} if the
     * peer's header is over a cap. Close the {@link Frames} to give their memory back.
     */
    public CompletableFuture<Frames> recvFramesAsync() {
        ucx.checkOpen();
        boolean checked = ucx.options().checkedMessages();
        return Ucx.adapt(engine.amTake(core, AmWire.FRAMES), d -> new Frames(d, checked), true, false);
    }

    /**
     * {@link #recvFramesAsync()}, waiting for the message.
     *
     * @return the frames, in receiver-allocated memory that closing them gives back
     */
    public Frames recvFrames() {
        return new Frames(message(AmWire.FRAMES, -1, "frames receive"), ucx.options().checkedMessages());
    }

    /**
     * {@link #recvFrames()} within {@code timeout}.
     *
     * @param timeout the longest wait; past it {@link UcxTimeoutException}
     * @return the frames, in receiver-allocated memory that closing them gives back
     */
    public Frames recvFrames(Duration timeout) {
        long t = Buffers.nanos(timeout);
        return new Frames(message(AmWire.FRAMES, t, "frames receive"), ucx.options().checkedMessages());
    }

    private Op framesOp(List<MemorySegment> frames, boolean blocking) {
        Objects.requireNonNull(frames, "frames");
        int max = ucx.options().maxFrames();
        if (frames.size() > max) {
            throw new IllegalArgumentException(frames.size() + " frames, more than maxFrames " + max);
        }
        List<MemorySegment> copy = List.copyOf(frames); // null frames rejected here
        copy.forEach(Buffers::alive);
        ucx.checkOpen();
        Op op = AmSend.frames(core, copy, blocking);
        Ucx.keepAlive(op, copy);
        return op;
    }

    /**
     * Sends a byte sequence (say, a serialized object) that {@link #recvObject()} gets back as a {@code byte[]}.
     *
     * @param object the bytes to send (copied)
     * @return a future of the object's size in bytes
     */
    public CompletableFuture<Long> sendObjectAsync(byte[] object) {
        Op op = objectOp(MemorySegment.ofArray(Objects.requireNonNull(object, "object")), false);
        engine.submit(op);
        return op;
    }

    /**
     * {@link #sendObjectAsync(byte[])} from native memory, which must stay untouched until the future completes.
     *
     * @param object the bytes to send: native memory (sent in place) or heap memory (copied)
     * @return a future of the object's size in bytes
     */
    public CompletableFuture<Long> sendObjectAsync(MemorySegment object) {
        Op op = objectOp(Objects.requireNonNull(object, "object"), false);
        engine.submit(op);
        return op;
    }

    /**
     * {@link #sendObjectAsync(byte[])}, waiting until the send completes.
     *
     * @param object the bytes to send (copied)
     */
    public void sendObject(byte[] object) {
        engine.await(submitted(objectOp(MemorySegment.ofArray(Objects.requireNonNull(object, "object")), true)), -1);
    }

    /**
     * {@link #sendObject(byte[])} within {@code timeout} (as a timed-out send, it aborts the endpoint).
     *
     * @param object the bytes to send (copied)
     * @param timeout the longest wait; past it {@link UcxTimeoutException}
     */
    public void sendObject(byte[] object, Duration timeout) {
        long t = Buffers.nanos(timeout);
        engine.await(submitted(objectOp(MemorySegment.ofArray(Objects.requireNonNull(object, "object")), true)), t);
    }

    /**
     * {@link #sendObjectAsync(MemorySegment)}, waiting until UCX is done with {@code object}.
     *
     * @param object the bytes to send: native memory (sent in place) or heap memory (copied)
     */
    public void sendObject(MemorySegment object) {
        engine.await(submitted(objectOp(Objects.requireNonNull(object, "object"), true)), -1);
    }

    /**
     * {@link #sendObject(MemorySegment)} within {@code timeout} (as a timed-out send, it aborts the endpoint).
     *
     * @param object the bytes to send: native memory (sent in place) or heap memory (copied)
     * @param timeout the longest wait; past it {@link UcxTimeoutException}
     */
    public void sendObject(MemorySegment object, Duration timeout) {
        long t = Buffers.nanos(timeout);
        engine.await(submitted(objectOp(Objects.requireNonNull(object, "object"), true)), t);
    }

    /**
     * {@link #recvObject()} without waiting.
     *
     * @return a future of the next object's bytes; it fails with {@link MessageRefusedException} if the object is over
     *     {@link UcxOptions#withMaxMessageBytes}
     */
    public CompletableFuture<byte[]> recvObjectAsync() {
        ucx.checkOpen();
        return Ucx.adapt(engine.amTake(core, AmWire.OBJECT),
                org.ucx4j.internal.engine.AmData::objectBytes, false, true);
    }

    /**
     * {@return the next object, a copy (no memory to give back)} {@link MessageRefusedException} if it is over
     * {@link UcxOptions#withMaxMessageBytes}.
     */
    public byte[] recvObject() {
        return objectBytes(take(AmWire.OBJECT, -1, "object receive"));
    }

    /**
     * {@link #recvObject()} within {@code timeout}.
     *
     * @param timeout the longest wait; past it {@link UcxTimeoutException}
     * @return the next object's bytes
     */
    public byte[] recvObject(Duration timeout) {
        long t = Buffers.nanos(timeout);
        return objectBytes(take(AmWire.OBJECT, t, "object receive"));
    }

    private Op objectOp(MemorySegment object, boolean blocking) {
        Buffers.alive(object);
        ucx.checkOpen();
        Op op = AmSend.object(core, object, blocking);
        Ucx.keepAlive(op, object);
        return op;
    }

    /** An object a blocking receive took: the array it arrived in, or a copy of a message kept in memory. */
    private static byte[] objectBytes(Object taken) {
        if (taken instanceof byte[] object) {
            return object;
        }
        org.ucx4j.internal.engine.AmData d = (org.ucx4j.internal.engine.AmData) taken;
        try {
            return d.objectBytes();
        } finally {
            d.free();
        }
    }

    // ---------------------------------------------------------------- RMA

    /**
     * Turns a peer's {@link MemoryRegion#packRemoteKey()} bytes into a key usable on this endpoint. Corrupted,
     * truncated or foreign bytes are refused with {@link IllegalArgumentException} before UCX sees them.
     *
     * @param packed the bytes of the peer's {@link MemoryRegion#packRemoteKey()}
     * @return a key for {@link #put} and {@link #get} on this endpoint only; close it once its operations completed
     * @throws IllegalStateException if this {@code Ucx} was opened without RMA ({@link UcxOptions#withRma})
     */
    public RemoteKey unpackRemoteKey(byte[] packed) {
        ucx.checkOpen();
        engine.checkRma("unpackRemoteKey");
        byte[][] ucxKey = new byte[1][];
        long[] region = RemoteKey.open(packed, ucxKey);
        long rkey = engine.rkeyUnpack(core, ucxKey[0]);
        return new RemoteKey(this, engine, region[0], region[1], rkey);
    }

    /**
     * Writes {@code src} into the peer's region at {@code remoteOffset}; completes when done locally.
     *
     * @param src native memory to write, valid and untouched until the future completes
     * @param key a key {@linkplain #unpackRemoteKey unpacked} on this endpoint
     * @param remoteOffset the byte offset into the peer's region; the access must lie within the region
     *     ({@link IndexOutOfBoundsException} otherwise)
     * @return a future of the number of bytes written; they are sure to be at the peer only after
     *     {@link #flushAsync()}
     */
    public CompletableFuture<Long> putAsync(MemorySegment src, RemoteKey key, long remoteOffset) {
        return rmaAsync(false, src, key, remoteOffset);
    }

    /**
     * {@link #putAsync(MemorySegment, RemoteKey, long)}, waiting until it is done locally.
     *
     * @param src native memory to write
     * @param key a key {@linkplain #unpackRemoteKey unpacked} on this endpoint
     * @param remoteOffset the byte offset into the peer's region; the access must lie within the region
     *     ({@link IndexOutOfBoundsException} otherwise)
     */
    public void put(MemorySegment src, RemoteKey key, long remoteOffset) {
        rma(false, src, key, remoteOffset, -1);
    }

    /**
     * {@link #put(MemorySegment, RemoteKey, long)} within {@code timeout}.
     *
     * @param src native memory to write
     * @param key a key {@linkplain #unpackRemoteKey unpacked} on this endpoint
     * @param remoteOffset the byte offset into the peer's region; the access must lie within the region
     *     ({@link IndexOutOfBoundsException} otherwise)
     * @param timeout the longest wait; past it {@link UcxTimeoutException}, and a put UCX already holds aborts the
     *     endpoint
     */
    public void put(MemorySegment src, RemoteKey key, long remoteOffset, Duration timeout) {
        rma(false, src, key, remoteOffset, Buffers.nanos(timeout));
    }

    /**
     * Reads {@code dst.byteSize()} bytes of the peer's region at {@code remoteOffset} into {@code dst}.
     *
     * @param dst writable native memory to read into, valid until the future completes
     * @param key a key {@linkplain #unpackRemoteKey unpacked} on this endpoint
     * @param remoteOffset the byte offset into the peer's region; the access must lie within the region
     *     ({@link IndexOutOfBoundsException} otherwise)
     * @return a future of the number of bytes read, {@code dst.byteSize()}
     */
    public CompletableFuture<Long> getAsync(MemorySegment dst, RemoteKey key, long remoteOffset) {
        return rmaAsync(true, dst, key, remoteOffset);
    }

    /**
     * {@link #getAsync(MemorySegment, RemoteKey, long)}, waiting for the data.
     *
     * @param dst writable native memory to read into
     * @param key a key {@linkplain #unpackRemoteKey unpacked} on this endpoint
     * @param remoteOffset the byte offset into the peer's region; the access must lie within the region
     *     ({@link IndexOutOfBoundsException} otherwise)
     * @return the number of bytes read, {@code dst.byteSize()}
     */
    public long get(MemorySegment dst, RemoteKey key, long remoteOffset) {
        return rma(true, dst, key, remoteOffset, -1);
    }

    /**
     * {@link #get(MemorySegment, RemoteKey, long)} within {@code timeout}.
     *
     * @param dst writable native memory to read into
     * @param key a key {@linkplain #unpackRemoteKey unpacked} on this endpoint
     * @param remoteOffset the byte offset into the peer's region; the access must lie within the region
     *     ({@link IndexOutOfBoundsException} otherwise)
     * @param timeout the longest wait; past it {@link UcxTimeoutException}, and a get UCX already holds aborts the
     *     endpoint
     * @return the number of bytes read, {@code dst.byteSize()}
     */
    public long get(MemorySegment dst, RemoteKey key, long remoteOffset, Duration timeout) {
        return rma(true, dst, key, remoteOffset, Buffers.nanos(timeout));
    }

    private CompletableFuture<Long> rmaAsync(boolean get, MemorySegment buf, RemoteKey key, long remoteOffset) {
        MemorySegment seg = Buffers.segment(buf, get);
        Op op = rmaStart(get, seg, key, remoteOffset, false, Long.MAX_VALUE);
        return op == InCall.SENT ? engine.completed(seg.byteSize()) : op;
    }

    private long rma(boolean get, MemorySegment buf, RemoteKey key, long remoteOffset, long timeoutNanos) {
        MemorySegment seg = Buffers.segment(buf, get);
        long deadline = engine.deadline(timeoutNanos);
        Op op = rmaStart(get, seg, key, remoteOffset, true, deadline);
        return op == InCall.SENT ? seg.byteSize() : engine.await(op, timeoutNanos, deadline);
    }

    /**
     * Starts a put or get: on the worker's owner thread (or one that borrows the worker) one UCX finishes inside
     * the call (same-host: a copy from or to the peer's mapped memory) needs no operation object ({@link InCall#SENT});
     * anything else is an op in flight.
     */
    private Op rmaStart(boolean get, MemorySegment seg, RemoteKey key, long remoteOffset, boolean blocking,
            long deadline) {
        Objects.requireNonNull(key, "key");
        if (key.endpoint() != this) {
            throw new IllegalArgumentException("remote key was unpacked on another endpoint: " + key.endpoint());
        }
        ucx.checkOpen();
        long rkey = key.acquire(remoteOffset, seg.byteSize()); // its close waits until the op is posted or queued
        try {
            long remote = key.remoteAddress() + remoteOffset;
            boolean borrowed = engine.enterCall(core, blocking, deadline, get ? "get" : "put");
            Op op = null;
            try {
                Op now = engine.inCall.rma(core, get, seg.address(), seg.byteSize(), remote, rkey, blocking);
                op = now == InCall.SENT ? now : now != null ? kept(now, seg)
                        : submitted(kept(engine.rma(core, get, seg.address(), seg.byteSize(), remote, rkey,
                                blocking), seg));
                return op;
            } finally {
                engine.leaveCall(borrowed, blocking && op != InCall.SENT ? op : null); // it waits for op next
            }
        } finally {
            key.release();
        }
    }

    /**
     * Completes when every put, get and send issued on this endpoint before it has completed at the peer.
     *
     * @return a future of 0 that completes once they have
     */
    public CompletableFuture<Long> flushAsync() {
        ucx.checkOpen();
        return submitted(engine.rmaFlush(core, false));
    }

    /** {@link #flushAsync()}, waiting until it completes. */
    public void flush() {
        ucx.checkOpen();
        engine.await(submitted(engine.rmaFlush(core, true)), -1);
    }

    /**
     * {@link #flush()} for at most {@code timeout}: past it a {@link UcxTimeoutException}, and the flush, which UCX
     * cannot withdraw and which holds none of the caller's memory, completes in the background; the endpoint lives
     * on (so does it when {@link #flushAsync()}'s future is canceled).
     *
     * @param timeout the longest wait
     */
    public void flush(Duration timeout) {
        long t = Buffers.nanos(timeout);
        ucx.checkOpen();
        engine.await(submitted(engine.rmaFlush(core, true)), t);
    }

    /** Test hook: an active message of {@code kind} with a header exactly as given (after ucx4j's prefix). */
    CompletableFuture<Long> sendForged(byte kind, MemorySegment header, MemorySegment payload) {
        Op op = AmSend.forged(core, kind, header, payload);
        engine.submit(op);
        return op;
    }

    // ---------------------------------------------------------------- lifecycle

    /** {@return bytes, messages and large-transfer bandwidth quantiles of this endpoint so far} */
    public EndpointStats stats() {
        org.ucx4j.internal.engine.PeerStats s = core.stats();
        double[] q = s.bandwidthQuantiles(0.25, 0.5, 0.75);
        return new EndpointStats(core.peer(), s.bytesSent(), s.bytesReceived(), s.messagesSent(),
                s.messagesReceived(), s.largeTransfers(), q[0], q[1], q[2]);
    }

    /**
     * Closes the endpoint gracefully, off the caller's thread, once {@code n} more messages have been received on
     * it (UCX-Py's {@code close_after_n_recv}): tag and stream receives that complete, and active messages (frames
     * and objects too, one each) as they arrive; gets, which this side issues, do not count. {@code n == 0} closes
     * now.
     *
     * @param n the number of receives to wait for, 0 or more ({@link IllegalArgumentException} if negative)
     */
    public void closeAfterReceives(long n) {
        if (n < 0) {
            throw new IllegalArgumentException("negative count: " + n);
        }
        ucx.checkOpen();
        core.closeAfterReceives(n, this::close);
    }

    /**
     * Starts a graceful close and returns at once; the future completes when the endpoint is released.
     *
     * @return {@link #closeFuture()}
     */
    public CompletableFuture<Void> closeAsync() {
        Thread.ofVirtual().name("ucx4j-close-" + core.peer()).start(this::close);
        return closeFuture();
    }

    /** {@return a process-unique random id (UUID)} */
    public UUID id() {
        return core.id();
    }

    /**
     * {@return "host:port" of the peer, as its connection's socket saw it} For a raw endpoint, {@code worker-address:}
     * and a hash of the address.
     */
    public String remoteAddress() {
        return core.peer();
    }

    /** {@return the peer's process id, from the ucx4j handshake} 0 for a raw endpoint, which has none. */
    public long peerPid() {
        return core.peerPid();
    }

    /**
     * {@return the peer's host name, as the peer itself gave it in the ucx4j handshake} With {@link #peerPid} it
     * names the peer's process (two processes on one host see the same name). Null for a raw endpoint, which has
     * no handshake.
     */
    public String peerHost() {
        return core.peerHost();
    }

    /**
     * {@return true until {@link #close} or {@link #abort} is called, the endpoint is closed otherwise, or its peer
     * is found dead}
     */
    public boolean isAlive() {
        return !closeCalled && core.isAlive() && !engine.isTerminated();
    }

    /** {@return true once the endpoint's UCX resources are released} */
    public boolean isClosed() {
        return core.isClosed() || engine.isTerminated();
    }

    /**
     * Runs {@code callback} once when the endpoint is closed: with null after a local close, with the cause after
     * a peer failure. Never runs on the progress thread.
     *
     * @param callback gets null or the cause; also run when added after the endpoint closed
     */
    public void onClose(Consumer<Throwable> callback) {
        core.onClose(Objects.requireNonNull(callback, "callback"));
    }

    /** {@return a future that completes when the endpoint is closed and released} */
    public CompletableFuture<Void> closeFuture() {
        return core.closedFuture();
    }

    /**
     * {@return UCX's description of the endpoint's lanes and transports ({@code ucp_ep_print_info})} Empty once
     * closed. Where ucx4j asks UCX for eager sends (shared memory with UCX's first protocols: see the internals
     * document), a last line says so: {@code # ucx4j eager sends: tag_send takes the tag_send_nbr thresholds ...}.
     */
    public String info() {
        return isClosed() ? "" : engine.endpointInfo(core);
    }

    /**
     * {@return the transports this endpoint's lanes use, as {@code transport/device} (e.g. {@code [posix/memory]}
     * between processes on one host, {@code [tcp/eth0]} across hosts without RDMA); empty once closed}
     */
    public List<String> transports() {
        return org.ucx4j.internal.engine.TransportInfo.lanes(info());
    }

    /**
     * Graceful close: pending receives fail with {@link EndpointClosedException}, sends in flight get up to the
     * close timeout to finish, then the endpoint is released. Idempotent; never waits longer than its bound.
     * Messages that arrived and were not read are freed, also on an endpoint its peer already closed (whose
     * messages stay readable until this close, or until the {@code Ucx} closes).
     */
    @Override
    public void close() {
        close(ucx.options().closeTimeout());
    }

    /**
     * {@link #close()} within {@code timeout}: the flush gets all of it but a tenth (at most 100 ms), kept for the
     * release; an endpoint whose worker cannot be reached meanwhile (a caller-mode owner that does not progress) is
     * released at the worker's next progress, after this returns. So may be one whose flush timed out: UCX still
     * holds that flush, and the endpoint is released once it ends, or after about 200 ms (a peer that takes
     * nothing); {@link #closeFuture()} completes then.
     *
     * @param timeout the bound on the whole close
     */
    public void close(Duration timeout) {
        long t = Buffers.nanos(timeout);
        long deadline = System.nanoTime() + t;
        if (isClosed() || engine.isTerminated()) {
            engine.discardUnread(core); // ended by its peer: what arrived before and was not read is freed now
            return;
        }
        engine.checkMayBlock("close"); // refused inside UCX's progress before anything changes (closeAsync works)
        closeCalled = true; // not alive from here on, also while the worker has yet to take the close
        Op flush = engine.closeEndpoint(core);
        try {
            engine.await(flush, t - Math.min(t / 10, RELEASE_SHARE_NANOS));
            core.flushed = true;
            if (core.sayBye()) { // sends are flushed: the peer may now fail what it still waits for
                // its answer says it took in what arrived; only then does this side's UCX endpoint go
                long share = Math.min(t / 10, RELEASE_SHARE_NANOS);
                engine.awaitByeAcknowledged(core, deadline - System.nanoTime() - share);
            }
        } catch (UcxException e) {
            // flush failed or timed out: abort below
        }
        engine.abortEndpoint(core);
        long left = deadline - System.nanoTime();
        if (engine.isOwnerThread()) { // the release runs in this thread's own progress: it keeps its share
            left = Math.max(left, Math.min(t / 10, RELEASE_SHARE_NANOS));
        }
        engine.awaitClosed(core, Math.max(0, left));
        engine.discardUnread(core);
        ucx.forget(this);
    }

    /** Set by {@link #close} and {@link #abort}, which the worker's thread may take later. */
    private volatile boolean closeCalled;

    /** The most of a close's bound kept for releasing the endpoint after its flush. */
    private static final long RELEASE_SHARE_NANOS = 100_000_000L;

    /** Closes at once without flushing; pending operations fail with {@link EndpointClosedException}. */
    public void abort() {
        closeCalled = true;
        if (!isClosed() && !engine.isTerminated()) {
            engine.abortEndpoint(core);
        }
        engine.discardUnread(core); // messages not read are freed, also those of an endpoint its peer ended
        ucx.forget(this);
    }

    @Override
    public String toString() {
        return "Endpoint[" + core.peer() + " id=" + core.id() + (isAlive() ? "" : " closed") + "]";
    }
}
