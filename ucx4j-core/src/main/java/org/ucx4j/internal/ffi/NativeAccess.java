package org.ucx4j.internal.ffi;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.invoke.MethodHandle;
import java.nio.file.Path;
import java.util.Optional;

/**
 * The one class that makes restricted {@code java.lang.foreign} calls (library loading, downcall handles, upcall
 * stubs, reinterpreting raw pointers). Keeping them here means {@code --enable-native-access} guidance has a single
 * point of truth, like Lucene's {@code PosixNativeAccess}.
 */
public final class NativeAccess {
    static final Linker LINKER = Linker.nativeLinker();

    private NativeAccess() {}

    /** True when this code may make restricted calls without the JVM refusing or warning. */
    public static boolean nativeAccessEnabled() {
        return NativeAccess.class.getModule().isNativeAccessEnabled();
    }

    /** The remedy to print when native access is not enabled. */
    public static String nativeAccessRemedy() {
        Module m = NativeAccess.class.getModule();
        if (m.isNamed()) { // a manifest's Enable-Native-Access names only ALL-UNNAMED
            return "run java with --enable-native-access=" + m.getName();
        }
        return "run java with --enable-native-access=ALL-UNNAMED"
                + " (or put Enable-Native-Access: ALL-UNNAMED in an executable jar's manifest)";
    }

    static SymbolLookup libraryByName(String name) {
        return SymbolLookup.libraryLookup(name, Arena.global());
    }

    static SymbolLookup libraryByPath(Path path) {
        return SymbolLookup.libraryLookup(path, Arena.global());
    }

    static SymbolLookup defaultLookup() {
        return LINKER.defaultLookup();
    }

    static MethodHandle downcall(SymbolLookup lookup, String name, FunctionDescriptor fd, Linker.Option... options) {
        Optional<MemorySegment> addr = lookup.find(name);
        if (addr.isEmpty()) {
            throw new UnsatisfiedLinkError("symbol not found: " + name);
        }
        return LINKER.downcallHandle(addr.get(), fd, options);
    }

    static Optional<MethodHandle> optionalDowncall(SymbolLookup lookup, String name, FunctionDescriptor fd) {
        return lookup.find(name).map(a -> LINKER.downcallHandle(a, fd));
    }

    /** Creates an upcall stub; call once per callback and keep it for the JVM's life. */
    public static MemorySegment upcall(MethodHandle target, FunctionDescriptor fd) {
        return LINKER.upcallStub(target, fd, Arena.global());
    }

    /** Views a raw native pointer as a segment of {@code size} bytes. */
    public static MemorySegment view(MemorySegment pointer, long size) {
        return pointer.reinterpret(size);
    }

    /** Views a raw address as a segment of {@code size} bytes. */
    public static MemorySegment view(long address, long size) {
        return MemorySegment.ofAddress(address).reinterpret(size);
    }

    /** Views a raw address as a segment of {@code size} bytes that is alive only while {@code scope} is open. */
    public static MemorySegment view(long address, long size, java.lang.foreign.Arena scope) {
        return MemorySegment.ofAddress(address).reinterpret(size, scope, null);
    }

    /**
     * All of the address space: raw reads and writes at an absolute address, with no segment per access. In a holder
     * of its own so that loading this class makes no restricted call: with {@code --illegal-native-access=deny}
     * {@link #nativeAccessEnabled()} must still answer (and {@code Ucx.unavailabilityCause()} give the remedy).
     */
    private static final class Raw {
        static final MemorySegment EVERYWHERE = MemorySegment.NULL.reinterpret(Long.MAX_VALUE);
    }

    /** All of the address space as one segment, for code that reads either native memory (at an address) or a copy. */
    public static MemorySegment everywhere() {
        return Raw.EVERYWHERE;
    }

    /** The 8-byte word at {@code address} (8-byte aligned, owned by the caller). */
    public static long getLong(long address) {
        return Raw.EVERYWHERE.get(java.lang.foreign.ValueLayout.JAVA_LONG, address);
    }

    /** Writes the 8-byte word at {@code address} (8-byte aligned, owned by the caller). */
    public static void setLong(long address, long value) {
        Raw.EVERYWHERE.set(java.lang.foreign.ValueLayout.JAVA_LONG, address, value);
    }

    /** The 4 bytes at {@code address}, any alignment. */
    public static int getIntUnaligned(long address) {
        return Raw.EVERYWHERE.get(java.lang.foreign.ValueLayout.JAVA_INT_UNALIGNED, address);
    }

    /** The 8 bytes at {@code address}, any alignment. */
    public static long getLongUnaligned(long address) {
        return Raw.EVERYWHERE.get(java.lang.foreign.ValueLayout.JAVA_LONG_UNALIGNED, address);
    }

    /** The byte at {@code address}. */
    public static byte getByte(long address) {
        return Raw.EVERYWHERE.get(java.lang.foreign.ValueLayout.JAVA_BYTE, address);
    }

    /** A copy of the {@code length} bytes at {@code address}. */
    public static byte[] toArray(long address, int length) {
        byte[] b = new byte[length];
        MemorySegment.copy(Raw.EVERYWHERE, java.lang.foreign.ValueLayout.JAVA_BYTE, address, b, 0, length);
        return b;
    }

    /** Copies {@code length} bytes from {@code address} to the start of {@code dst}. */
    public static void copy(long address, byte[] dst, int length) {
        MemorySegment.copy(Raw.EVERYWHERE, java.lang.foreign.ValueLayout.JAVA_BYTE, address, dst, 0, length);
    }

    /** Copies {@code length} bytes from {@code address} to the start of {@code dst}. */
    public static void copy(long address, MemorySegment dst, long length) {
        MemorySegment.copy(Raw.EVERYWHERE, address, dst, 0, length);
    }

    /** {@code segment} bound to {@code scope}: inaccessible once it closes, and {@code cleanup} runs then. */
    public static MemorySegment scoped(MemorySegment segment, Arena scope, Runnable cleanup) {
        return segment.reinterpret(scope, s -> cleanup.run());
    }

    /** Reads a NUL-terminated C string at {@code pointer}, or null for NULL. */
    public static String cString(MemorySegment pointer) {
        if (pointer == null || pointer.address() == 0) {
            return null;
        }
        return pointer.reinterpret(Long.MAX_VALUE).getString(0);
    }
}
