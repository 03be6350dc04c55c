package org.apache.spark.shuffle.ucx4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.InputStream;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;

import org.junit.jupiter.api.Test;
import org.ucx4j.AmMessage;
import org.ucx4j.Endpoint;
import org.ucx4j.Listener;
import org.ucx4j.MemoryAllocator;
import org.ucx4j.MemoryType;
import org.ucx4j.Ucx;
import org.ucx4j.UcxOptions;

/** A fetched block read on one thread while another releases it: the reader never sees freed memory. */
class UcxManagedBufferTest {
    static final Duration T = Duration.ofSeconds(20);
    static final int SIZE = 256 << 10; // lands in memory from the allocator below (pulled, or copied there if eager)
    static final byte POISON = (byte) 0xAB;

    @Test
    void aReleaseWhileAnotherThreadReadsFreesAfterTheReadNeverUnderIt() throws Exception {
        AtomicLong freed = new AtomicLong();
        MemoryAllocator poisoning = new MemoryAllocator() { // freed memory reads as POISON until reused
            @Override
            public MemorySegment allocate(long bytes) {
                return MemoryAllocator.malloc().allocate(bytes);
            }

            @Override
            public void free(MemorySegment segment) {
                segment.fill(POISON);
                freed.incrementAndGet();
                MemoryAllocator.malloc().free(segment);
            }
        };
        try (Ucx server = Ucx.open(); Ucx reducer = Ucx.open(UcxOptions.defaults()
                .withAllocator(MemoryType.HOST, poisoning)); Arena arena = Arena.ofShared()) {
            CompletableFuture<Endpoint> accepted = new CompletableFuture<>();
            try (Listener l = server.listen(0, accepted::complete)) {
                Endpoint in = reducer.connect("127.0.0.1", l.port());
                Endpoint out = accepted.get(10, TimeUnit.SECONDS);
                MemorySegment zeros = arena.allocate(SIZE); // zeroed
                MemorySegment header = MemorySegment.ofArray(new byte[1]);
                int rounds = 200;
                for (int round = 0; round < rounds; round++) {
                    out.amSend(header, zeros, T);
                    AmMessage m = in.amRecv(T);
                    UcxManagedBuffer block = new UcxManagedBuffer(m);
                    InputStream stream = block.createInputStream();
                    CompletableFuture<Long> reader = CompletableFuture.supplyAsync(() -> read(stream),
                            r -> Thread.ofPlatform().start(r));
                    LockSupport.parkNanos((round % 20) * 10_000L);
                    block.release();
                    long got = reader.get(20, TimeUnit.SECONDS);
                    assertTrue(got >= 0, "round " + round + ": read freed memory (byte " + (-got - 1) + ")");
                }
                assertEquals(rounds, freed.get(), "every block freed once");
                // a release before any read: the stream refuses, nothing is read
                out.amSend(header, zeros, T);
                UcxManagedBuffer gone = new UcxManagedBuffer(in.amRecv(T));
                InputStream late = gone.createInputStream();
                gone.release();
                assertThrows(IOException.class, () -> late.read(new byte[16]));
            }
        }
    }

    /** Bytes read before the stream refused (all zero), or -(index + 1) of the first non-zero byte. */
    private static long read(InputStream s) {
        byte[] chunk = new byte[4096];
        long total = 0;
        try {
            for (int n; (n = s.read(chunk)) > 0; total += n) {
                for (int i = 0; i < n; i++) {
                    if (chunk[i] != 0) {
                        return -(total + i + 1);
                    }
                }
            }
        } catch (IOException released) {
            // released between two reads: refused, as it must be
        }
        return total;
    }
}
