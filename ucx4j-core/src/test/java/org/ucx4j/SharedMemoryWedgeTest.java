package org.ucx4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A same-host peer SIGKILLed while writing into this worker's shared-memory FIFO leaves a slot claimed and never
 * filled, and UCX then receives nothing more over shared memory from any peer. ucx4j notices (a self-check after the
 * peer's death) and fails the endpoints that would otherwise wait forever.
 */
class SharedMemoryWedgeTest {
    static final Duration T = Duration.ofSeconds(10);
    static final long FLOOD_TAG = 0x5eed;

    @Test
    void aPeerKilledMidWriteWedgesTheFifoAndSameHostEndpointsFailTypedInsteadOfWaitingForever(@TempDir Path dir)
            throws Exception {
        Path flooder = MessagingTest.buildC(dir, "shm_flooder");
        BlockingQueue<Endpoint> accepted = new LinkedBlockingQueue<>();
        try (Ucx a = Ucx.open(); Ucx b = Ucx.open(); Arena arena = Arena.ofShared();
                Listener l = a.listen(0, accepted::add); Endpoint ba = b.connect("127.0.0.1", l.port())) {
            Endpoint ab = accepted.poll(10, TimeUnit.SECONDS);
            Assumptions.assumeTrue(ab.info().contains("posix"), "shared memory is not in use: " + ab.info());
            assertTrue(a.checkSharedMemory(T), "a healthy worker passes the check");
            assertTrue(a.sharedMemoryFailure().isEmpty());
            CompletableFuture<UcxException> told = new CompletableFuture<>();
            CompletableFuture<Thread> toldOn = new CompletableFuture<>();
            a.onSharedMemoryFailure(e -> {
                toldOn.complete(Thread.currentThread());
                told.complete(e);
            });
            Thread drainer = Thread.ofVirtual().start(() -> { // takes the flood, so it never backs up
                MemorySegment buf = arena.allocate(64 << 10);
                while (!a.isClosed()) {
                    try {
                        a.recvTagged(buf, FLOOD_TAG, -1L >>> 1, Duration.ofMillis(200));
                    } catch (RuntimeException e) {
                        // timed out, or the worker closed
                    }
                }
            });
            MemorySegment msg = arena.allocate(8);
            for (int attempt = 1; ; attempt++) {
                // each kill wedges the FIFO with some probability (about every second one here): until one does
                Assumptions.assumeTrue(attempt <= 30, "no kill wedged the FIFO in 30 attempts");
                ProcessBuilder pb = new ProcessBuilder(flooder.toString(), "30000", String.valueOf(FLOOD_TAG))
                        .redirectError(ProcessBuilder.Redirect.INHERIT);
                pb.environment().putAll(Ucx.environmentDefaults()); // same FIFO layout, address format v2
                Process c = pb.start();
                try {
                    BufferedReader out = new BufferedReader(
                            new InputStreamReader(c.getInputStream(), StandardCharsets.UTF_8));
                    String line = NativeBuild.nextLine(out);
                    assertTrue(line != null && line.startsWith("ADDRESS "), "flooder said: " + line);
                    // a raw endpoint to the flooder: its death is what makes the worker check its FIFO
                    Endpoint raw = a.connect(WorkerAddress.fromHex(line.substring(8)));
                    c.getOutputStream().write((a.workerAddress().toHex() + "\n").getBytes(StandardCharsets.UTF_8));
                    c.getOutputStream().flush();
                    assertEquals("FLOODING", NativeBuild.nextLine(out));
                    Thread.sleep(ThreadLocalRandom.current().nextInt(20, 100));
                    CompletableFuture<Long> pending = ab.recvAsync(msg, 1);
                    c.destroyForcibly(); // SIGKILL, most likely in the middle of a copy into a's FIFO
                    c.waitFor();
                    long killedAt = System.nanoTime();
                    ba.send(msg, 1);
                    // received (a is perhaps still draining the flood: no fixed wait decides it) or failed: b's
                    // message stuck behind the slot the flooder never filled; a timeout would be waiting forever
                    ExecutionException e;
                    try {
                        pending.get(9, TimeUnit.SECONDS);
                        raw.close();
                        continue; // this kill did not wedge the FIFO
                    } catch (ExecutionException failed) {
                        e = failed;
                    } catch (TimeoutException waitedOn) {
                        throw new AssertionError("the receive from a live same-host peer neither arrived nor failed "
                                + "within 9 s of the kill", waitedOn);
                    }
                    long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - killedAt);
                    assertInstanceOf(ConnectionResetException.class, e.getCause(), e.getCause().toString());
                    assertTrue(e.getCause().getMessage().contains("wedged")
                            && e.getCause().getMessage().contains("UCS_ERR_IO_ERROR"), e.getCause().getMessage());
                    assertTrue(ms < 9000, "failed " + ms + " ms after the kill");
                    assertTrue(a.sharedMemoryFailure().isPresent());
                    // the failure callback ran once, off the progress thread, with the same failure
                    assertTrue(told.get(5, TimeUnit.SECONDS) == a.sharedMemoryFailure().get());
                    assertTrue(toldOn.get().isVirtual(), "callback ran on " + toldOn.get());
                    CompletableFuture<UcxException> late2 = new CompletableFuture<>();
                    a.onSharedMemoryFailure(late2::complete); // registered after the fact: runs at once
                    assertTrue(late2.get(5, TimeUnit.SECONDS) == told.get());
                    assertFalse(a.checkSharedMemory(T));
                    assertFalse(ab.isAlive());
                    UcxException late = assertThrows(UcxException.class, () -> ab.recv(msg, 1, T));
                    assertTrue(late.getMessage().contains("wedged"), late.getMessage());
                    // a new same-host connection is refused with the reason, on both sides
                    try (Ucx d = Ucx.open()) {
                        UcxException refused = assertThrows(UcxException.class, () -> d.connect("127.0.0.1", l.port()));
                        assertTrue(refused.getMessage().contains("wedged"), refused.getMessage());
                    }
                    System.out.println("wedged at attempt " + attempt + "; endpoints failed " + ms + " ms after");
                    break;
                } finally {
                    c.destroyForcibly();
                }
            }
            drainer.interrupt();
        }
    }

    @Test
    void aHealthyWorkerNeverCallsTheFailureCallback() throws Exception {
        try (Ucx a = Ucx.open()) {
            CompletableFuture<UcxException> told = new CompletableFuture<>();
            a.onSharedMemoryFailure(told::complete);
            assertTrue(a.checkSharedMemory(T));
            Thread.sleep(200);
            assertFalse(told.isDone());
            assertThrows(NullPointerException.class, () -> a.onSharedMemoryFailure(null));
            a.close();
            assertThrows(EndpointClosedException.class, () -> a.onSharedMemoryFailure(e -> { }));
        }
    }
}
