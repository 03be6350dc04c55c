package org.ucx4j;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import org.ucx4j.internal.engine.AmData;

/**
 * The receiver-allocated memory behind an {@link AmMessage} or {@link Frames}: the payload, optionally bound to its
 * own shared arena ({@link UcxOptions#withCheckedMessages}), given back once at close.
 */
final class ReceivedMemory {
    private final AmData data;
    private final Arena scope;
    final MemorySegment payload;

    ReceivedMemory(AmData data, boolean checked) {
        this.data = data;
        this.scope = checked ? Arena.ofShared() : null;
        this.payload = checked ? org.ucx4j.internal.ffi.NativeAccess.scoped(data.payload(), scope, data::free)
                : data.payload();
    }

    /** Throws once the memory was given back; {@code what} names the holder in the message. */
    void checkOpen(String what) {
        if (data.isFreed()) {
            throw new IllegalStateException(what + " closed: its memory was given back");
        }
    }

    /** Gives the memory back. Idempotent. */
    void close() {
        if (scope == null) {
            data.free();
        } else if (scope.scope().isAlive()) {
            try {
                scope.close();
            } catch (IllegalStateException alreadyClosed) {
                // closed concurrently
            }
        }
    }
}
