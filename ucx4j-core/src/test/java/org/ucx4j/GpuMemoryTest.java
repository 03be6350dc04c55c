package org.ucx4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;

/**
 * GPU memory (CUDA) through ucx4j where UCX moves it: segments over {@code cudaMalloc}'s pointers are sent and
 * received device to device (tags, streams) and an active message's device payload lands in host memory, bytes
 * checked through {@code cudaMemcpy}. Skipped where {@link Ucx#memoryTypes()} has no CUDA or the CUDA runtime is
 * not found ({@code UCX4J_CUDART}, else {@code /usr/local/cuda/lib64}): this machine's CI. Run on an H100 host with
 * UCX 1.20.1 built with CUDA (thirty-seventh session), where ucx4j named every buffer host memory until then and
 * the first send of a device segment crashed the JVM (SIGSEGV in memcpy).
 */
class GpuMemoryTest {
    private static final Duration T = Duration.ofSeconds(30);
    private static final int HOST_TO_DEVICE = 1, DEVICE_TO_HOST = 2;

    /** The CUDA runtime calls the test needs. */
    private record Cuda(MethodHandle malloc, MethodHandle memcpy, MethodHandle free) {
        static Optional<Cuda> find() {
            String given = System.getenv("UCX4J_CUDART");
            Optional<Path> lib = given != null ? Optional.of(Path.of(given)) : libcudart();
            if (lib.isEmpty() || !Files.exists(lib.get())) {
                return Optional.empty();
            }
            Linker l = Linker.nativeLinker();
            SymbolLookup cuda = SymbolLookup.libraryLookup(lib.get(), Arena.global());
            return Optional.of(new Cuda(
                    l.downcallHandle(cuda.find("cudaMalloc").orElseThrow(), FunctionDescriptor.of(ValueLayout.JAVA_INT,
                            ValueLayout.ADDRESS, ValueLayout.JAVA_LONG)),
                    l.downcallHandle(cuda.find("cudaMemcpy").orElseThrow(), FunctionDescriptor.of(ValueLayout.JAVA_INT,
                            ValueLayout.ADDRESS, ValueLayout.ADDRESS, ValueLayout.JAVA_LONG, ValueLayout.JAVA_INT)),
                    l.downcallHandle(cuda.find("cudaFree").orElseThrow(), FunctionDescriptor.of(ValueLayout.JAVA_INT,
                            ValueLayout.ADDRESS))));
        }

        private static Optional<Path> libcudart() {
            Path dir = Path.of("/usr/local/cuda/lib64");
            if (!Files.isDirectory(dir)) {
                return Optional.empty();
            }
            try (Stream<Path> s = Files.list(dir)) {
                return s.filter(p -> p.getFileName().toString().matches("libcudart\\.so\\.\\d+.*")).sorted().findFirst();
            } catch (java.io.IOException e) {
                return Optional.empty();
            }
        }

        MemorySegment alloc(long size) throws Throwable {
            try (Arena a = Arena.ofConfined()) {
                MemorySegment out = a.allocate(ValueLayout.ADDRESS);
                check((int) malloc.invokeExact(out, size), "cudaMalloc");
                return out.get(ValueLayout.ADDRESS, 0).reinterpret(size);
            }
        }

        void copy(MemorySegment dst, MemorySegment src, long size, int kind) throws Throwable {
            check((int) memcpy.invokeExact(dst, src, size, kind), "cudaMemcpy");
        }

        void release(MemorySegment p) throws Throwable {
            check((int) free.invokeExact(p), "cudaFree");
        }

        private static void check(int rc, String what) {
            if (rc != 0) {
                throw new IllegalStateException(what + " failed: cudaError " + rc);
            }
        }
    }

    @Test
    void deviceSegmentsMoveDeviceToDeviceAndADevicePayloadLandsInHostMemory() throws Throwable {
        try (Ucx a = Ucx.open(); Ucx b = Ucx.open(); Arena arena = Arena.ofShared()) {
            assumeTrue(a.memoryTypes().contains(MemoryType.CUDA), "UCX moves no CUDA memory here");
            Optional<Cuda> found = Cuda.find();
            assumeTrue(found.isPresent(), "no CUDA runtime (libcudart) found");
            Cuda cuda = found.get();
            long max = 16L << 20;
            MemorySegment src = cuda.alloc(max), dst = cuda.alloc(max);
            try {
                MemorySegment back = arena.allocate(max);
                CompletableFuture<Endpoint> accepted = new CompletableFuture<>();
                try (Listener l = a.listen("127.0.0.1", 0, accepted::complete)) {
                    Endpoint client = b.connect("127.0.0.1", l.port(), T);
                    Endpoint server = accepted.get(10, TimeUnit.SECONDS);
                    int seed = 0;
                    for (long size : new long[] {1, 8, 4096, 65536, 1 << 20, 16 << 20}) {
                        seed++;
                        cuda.copy(src, Data.pattern(arena, size, seed), size, HOST_TO_DEVICE);
                        // tag: device to device
                        CompletableFuture<Long> r = server.recvAsync(dst.asSlice(0, size), 5);
                        client.send(src.asSlice(0, size), 5, T);
                        assertEquals(size, r.get(30, TimeUnit.SECONDS));
                        cuda.copy(back, dst, size, DEVICE_TO_HOST);
                        Data.verify(back.asSlice(0, size), size, seed);
                        // stream: device to device, exact length
                        cuda.copy(dst, arena.allocate(size), size, HOST_TO_DEVICE); // cleared
                        CompletableFuture<Long> s = server.streamRecvAsync(dst.asSlice(0, size));
                        client.streamSend(src.asSlice(0, size), T);
                        assertEquals(size, s.get(30, TimeUnit.SECONDS));
                        cuda.copy(back, dst, size, DEVICE_TO_HOST);
                        Data.verify(back.asSlice(0, size), size, seed);
                        // active message: a device payload, received into the host memory ucx4j allocates
                        client.amSend(MemorySegment.ofArray(new byte[] {(byte) seed}), src.asSlice(0, size), T);
                        try (AmMessage m = server.amRecv(T)) {
                            assertEquals(seed, m.headerBytes()[0]);
                            Data.verify(m.payload(), size, seed);
                        }
                    }
                    client.close();
                    server.close();
                }
            } finally {
                cuda.release(src);
                cuda.release(dst);
            }
        }
    }
}
