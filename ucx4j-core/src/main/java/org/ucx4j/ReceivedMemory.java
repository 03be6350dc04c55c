package org.ucx4j;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import org.ucx4j.internal.engine.AmData;

/**
 * The receiver-allocated memory behind an {@link AmMessage} or {@link Frames}. Normally the holder keeps only the
 * engine's {@link AmData}; with {@link UcxOptions#withCheckedMessages} it also keeps one of these: the payload bound
 * to a shared arena of its own, so a late access fails cleanly, and the memory is given back when the arena closes.
 */
final class ReceivedMemory {
    private final Arena scope = Arena.ofShared();
    final MemorySegment payload;

    ReceivedMemory(AmData data) {
        this.payload = org.ucx4j.internal.ffi.NativeAccess.scoped(data.payload(), scope, data::free);
        data.bindToArena();
    }

    /** Throws once the memory was given back; {@code what} names the holder in the message. */
    static void checkOpen(AmData data, String what) {
        if (data.isFreed()) {
            throw new IllegalStateException(what + " closed: its memory was given back");
        }
    }

    /**
     * Gives the memory back, through the arena when {@code checked} is not null. Idempotent.
     *
     * @throws IllegalStateException if the payload is in use by a native call or an I/O operation right now (the
     *     message stays open and can be closed again once that ends)
     */
    static void close(AmData data, ReceivedMemory checked) {
        if (checked == null) {
            data.free();
        } else if (checked.scope.scope().isAlive()) {
            try {
                checked.scope.close();
            } catch (IllegalStateException e) {
                if (checked.scope.scope().isAlive()) { // not a close from another thread: the arena is in use
                    throw new IllegalStateException("the message's payload is in use by a native call or an I/O "
                            + "operation; it stays open: close it again once that ends", e);
                }
            }
        }
    }
}
