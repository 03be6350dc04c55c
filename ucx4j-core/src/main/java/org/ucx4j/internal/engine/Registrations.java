package org.ucx4j.internal.engine;

import static java.lang.foreign.ValueLayout.JAVA_BYTE;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;
import static org.ucx4j.internal.ffi.Structs.*;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;
import org.ucx4j.UcxException;
import org.ucx4j.internal.ffi.NativeAccess;
import org.ucx4j.internal.ffi.Status;
import org.ucx4j.internal.ffi.Ucp;

/**
 * A worker's memory registrations and unpacked remote keys: what RMA needs, tracked so that closing the worker
 * releases what the application did not. Owner thread only (the engine's {@code onOwner} calls in).
 */
final class Registrations {
    private static final org.slf4j.Logger LOG = org.slf4j.LoggerFactory.getLogger(Registrations.class);
    private final long context;
    private final Set<Long> rkeys = new HashSet<>();
    private final Set<Long> memhs = new HashSet<>();
    /** The arenas of segments over UCX-allocated memory, by memh: closed before the memory is freed. */
    private final Map<Long, Arena> allocated = new HashMap<>();

    /** Whether every buffer is host memory ({@code Engine.hostOnly}): then a registration names its memory so. */
    private final boolean hostOnly;

    Registrations(long context, boolean hostOnly) {
        this.context = context;
        this.hostOnly = hostOnly;
    }

    /** Registers {@code length} bytes at {@code address} for local and remote read/write; returns the memh. */
    long map(long address, long length) {
        try (Arena a = Arena.ofConfined()) {
            long memh = ucpMemMap(a, address, length, 0);
            memhs.add(memh);
            return memh;
        }
    }

    /** {@code ucp_mem_map} for local and remote read/write, with {@code flags}. */
    private long ucpMemMap(Arena a, long address, long length, int flags) {
        MemorySegment p = a.allocate(UCP_MEM_MAP_PARAMS);
        // memory UCX allocates is host memory; an application's segment may be a GPU's where UCX handles those
        boolean host = hostOnly || (flags & UCP_MEM_MAP_ALLOCATE) != 0;
        p.set(JAVA_LONG, MMP_FIELD_MASK, UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH
                | UCP_MEM_MAP_PARAM_FIELD_FLAGS | UCP_MEM_MAP_PARAM_FIELD_PROT
                | (host ? UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE : 0));
        p.set(JAVA_LONG, MMP_ADDRESS, address);
        p.set(JAVA_LONG, MMP_LENGTH, length);
        p.set(JAVA_INT, MMP_FLAGS, flags);
        p.set(JAVA_INT, MMP_PROT, UCP_MEM_MAP_PROT_LOCAL_READ | UCP_MEM_MAP_PROT_LOCAL_WRITE
                | UCP_MEM_MAP_PROT_REMOTE_READ | UCP_MEM_MAP_PROT_REMOTE_WRITE);
        p.set(JAVA_INT, MMP_MEMORY_TYPE, UCS_MEMORY_TYPE_HOST);
        MemorySegment out = a.allocate(JAVA_LONG);
        Engine.check(Ucp.memMap(context, p.address(), out.address()),
                flags == 0 ? "ucp_mem_map" : "ucp_mem_map(allocate)");
        return out.get(JAVA_LONG, 0);
    }

    /**
     * Has UCX allocate and register {@code length} bytes ({@code ucp_mem_map} with {@code UCP_MEM_MAP_ALLOCATE}, as
     * ucx_perftest does): UCX takes shared memory first (sysv, posix), which peers on this host map and copy from
     * directly instead of going through the kernel. Returns the registration and a segment over the memory in
     * {@code arena}; the arena is closed before the memory is freed, however that happens.
     */
    Engine.Allocation allocate(long length, Arena arena) {
        try (Arena a = Arena.ofConfined()) {
            long memh = ucpMemMap(a, 0, length, UCP_MEM_MAP_ALLOCATE);
            MemorySegment attr = a.allocate(UCP_MEM_ATTR);
            attr.set(JAVA_LONG, MA_FIELD_MASK, UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH);
            int st = Ucp.memQuery(memh, attr.address());
            if (st != Status.OK) {
                Ucp.memUnmap(context, memh);
                Engine.check(st, "ucp_mem_query");
            }
            long address = attr.get(JAVA_LONG, MA_ADDRESS);
            // UCX may round the length up; the caller sees what it asked for
            MemorySegment seg = MemorySegment.ofAddress(address).reinterpret(length, arena, null);
            memhs.add(memh);
            allocated.put(memh, arena);
            return new Engine.Allocation(memh, seg);
        }
    }

    /** Unregisters memory (freeing it if UCX allocated it); a no-op for one already gone. */
    void unmap(long memh) {
        if (memhs.remove(memh)) {
            release(memh);
        }
    }

    private void release(long memh) {
        Arena arena = allocated.remove(memh);
        if (arena != null) {
            try {
                arena.close(); // the segment goes before the memory does
            } catch (IllegalStateException e) {
                if (arena.scope().isAlive()) { // an I/O or native call is using the segment: never freed under it
                    LOG.warn("ucx4j: memory UCX allocated stays mapped: its segment is in use ({})", e.getMessage());
                    return;
                }
            }
        }
        Engine.check(Ucp.memUnmap(context, memh), "ucp_mem_unmap");
    }

    /** The packed remote key of a registration ({@code ucp_rkey_pack}). */
    byte[] pack(long memh) {
        if (!memhs.contains(memh)) { // unregistered meanwhile (its region or the worker closed): UCX freed it
            throw new IllegalStateException("memory region is closed");
        }
        try (Arena a = Arena.ofConfined()) {
            MemorySegment out = a.allocate(JAVA_LONG, 2);
            Engine.check(Ucp.rkeyPack(context, memh, out.address(), out.address() + 8), "ucp_rkey_pack");
            long buf = out.getAtIndex(JAVA_LONG, 0);
            byte[] b = NativeAccess.view(buf, out.getAtIndex(JAVA_LONG, 1)).toArray(JAVA_BYTE);
            Ucp.rkeyBufferRelease(buf);
            return b;
        }
    }

    /** Unpacks remote-key bytes (already validated) on an open endpoint; returns the rkey handle. */
    long unpack(EndpointCore ep, byte[] packed) {
        try (Arena a = Arena.ofConfined()) {
            // zero padding after the key: UCX's parser takes no length, so a key cut short reads zeros, not past
            // the buffer (a forged key whose content lies is still beyond what bytes can be checked for)
            MemorySegment buf = a.allocate(packed.length + 256, 16); // Arena.allocate zeroes it
            MemorySegment.copy(packed, 0, buf, JAVA_BYTE, 0, packed.length);
            MemorySegment out = a.allocate(JAVA_LONG);
            Engine.check(Ucp.epRkeyUnpack(ep.handle, buf.address(), out.address()), "ucp_ep_rkey_unpack");
            long rkey = out.get(JAVA_LONG, 0);
            rkeys.add(rkey);
            return rkey;
        }
    }

    /** Destroys a remote key; a no-op for one already gone. */
    void destroyRkey(long rkey) {
        if (rkeys.remove(rkey)) {
            Ucp.rkeyDestroy(rkey);
        }
    }

    /** Destroys every remote key still unpacked (before the worker goes: keys belong to its endpoints). */
    void destroyRkeys() {
        for (long rkey : rkeys) {
            Ucp.rkeyDestroy(rkey);
        }
        rkeys.clear();
    }

    /** Unregisters (and frees) every registration still held (the worker is gone; before the context goes). */
    void unmapAll() {
        for (long memh : memhs) {
            try {
                release(memh);
            } catch (UcxException ignored) {
                // going anyway
            }
        }
        memhs.clear();
    }
}
