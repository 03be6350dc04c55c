package org.ucx4j;

import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import org.ucx4j.internal.engine.AmData;
import org.ucx4j.internal.engine.AmWire;

/**
 * A received multi-frame message ({@link Endpoint#sendFrames}): the frames in order, each a slice of memory the
 * receiver allocated. Close it to give the memory back; frames must not be used afterwards (see {@link AmMessage}
 * for {@link UcxOptions#withCheckedMessages}, which makes a late access fail cleanly).
 */
public final class Frames implements AutoCloseable {
    private final AmData data;
    private final ReceivedMemory checked; // null unless UcxOptions#withCheckedMessages
    private final List<MemorySegment> frames;
    private final long totalBytes;

    Frames(AmData data, boolean checked) {
        this.data = data;
        List<MemorySegment> list;
        long at = 0;
        try {
            this.checked = checked ? new ReceivedMemory(data) : null;
            MemorySegment all = checked ? this.checked.payload : data.payload();
            long[] sizes = AmWire.frameSizes(data.header());
            list = new ArrayList<>(sizes.length);
            for (long size : sizes) {
                list.add(all.asSlice(at, size));
                at += size;
            }
        } catch (RuntimeException | Error e) { // the message is not handed out: freed here, not leaked
            data.free();
            throw e;
        }
        this.frames = Collections.unmodifiableList(list);
        this.totalBytes = at;
    }

    /** {@return the number of frames (known after {@link #close()} too)} */
    public int count() {
        return frames.size();
    }

    /**
     * {@return frame {@code i}, valid until {@link #close()}}
     *
     * @param i the frame's index, 0 .. {@link #count()} - 1
     * @throws IndexOutOfBoundsException if {@code i} is out of that range
     * @throws IllegalStateException if the frames are closed
     */
    public MemorySegment get(int i) {
        checkOpen();
        return frames.get(i);
    }

    /**
     * {@return all frames, in the order they were sent (an unmodifiable list, valid until {@link #close()})}
     *
     * @throws IllegalStateException if the frames are closed
     */
    public List<MemorySegment> list() {
        checkOpen();
        return frames;
    }

    private void checkOpen() {
        ReceivedMemory.checkOpen(data, "frames are");
    }

    /** {@return the frames' total length in bytes (known after {@link #close()} too)} */
    public long totalBytes() {
        return totalBytes;
    }

    /**
     * Gives the memory back. Idempotent.
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
        return "Frames[" + frames.size() + " frames, " + totalBytes + " B]";
    }
}
