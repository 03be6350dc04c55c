package org.ucx4j;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import org.ucx4j.internal.engine.AmData;
import org.ucx4j.internal.engine.AmWire;

/**
 * A received multi-frame message ({@link Endpoint#sendFrames}): the frames in order, each a slice of memory the
 * receiver allocated. Close it to give the memory back; the frames are inaccessible afterwards.
 */
public final class Frames implements AutoCloseable {
    private final Arena scope;
    private final List<MemorySegment> frames;
    private final long totalBytes;

    Frames(AmData data) {
        this.scope = Arena.ofShared();
        MemorySegment all = org.ucx4j.internal.ffi.NativeAccess.scoped(data.payload(), scope, data::free);
        long[] sizes = AmWire.frameSizes(data.header());
        List<MemorySegment> list = new ArrayList<>(sizes.length);
        long at = 0;
        for (long size : sizes) {
            list.add(all.asSlice(at, size));
            at += size;
        }
        this.frames = Collections.unmodifiableList(list);
        this.totalBytes = at;
    }

    public int count() {
        return frames.size();
    }

    /** Frame {@code i}, valid until {@link #close()}. */
    public MemorySegment get(int i) {
        return frames.get(i);
    }

    /** All frames, in the order they were sent. */
    public List<MemorySegment> list() {
        return frames;
    }

    public long totalBytes() {
        return totalBytes;
    }

    /** Gives the memory back. Idempotent. */
    @Override
    public void close() {
        if (scope.scope().isAlive()) {
            try {
                scope.close();
            } catch (IllegalStateException alreadyClosed) {
                // closed concurrently
            }
        }
    }

    @Override
    public String toString() {
        return "Frames[" + frames.size() + " frames, " + totalBytes + " B]";
    }
}
