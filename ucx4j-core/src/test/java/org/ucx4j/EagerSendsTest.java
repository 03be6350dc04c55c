package org.ucx4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Over shared memory UCX's first protocols (1.13 to 1.15) announce a tag message from 32 KiB on, and an active
 * message too, and send its bytes once the receiver answers; ucx4j asks for eager sends up to 512 KiB there (a
 * 256 KiB tag message was UCX's rendezvous even with fast completion), as UCX 1.16 and later choose by themselves,
 * unless the application set the rendezvous threshold. Seen from outside: such a send completes while the receiving worker makes no progress at
 * all, and its bytes arrive intact when the receiver takes them; with a threshold set it waits for the receiver.
 * The receiver here is in caller mode and does nothing until it receives; the sender has a progress thread.
 */
@org.junit.jupiter.api.Timeout(120)
class EagerSendsTest {
    static final long TAG_SIZE = 256 << 10, AM_SIZE = 512 << 10;
    static final int TAG = 5;
    static final String EAGER_LINE = "# ucx4j eager sends: tag_send takes the tag_send_nbr thresholds";

    @Test
    void sharedMemorySendsUpToTheEagerLimitsCompleteBeforeTheReceiverLooks() throws Exception {
        // the FIFO must hold both messages (ucx4j's 32 KiB segments), and UCX's thresholds must be its own
        for (String v : new String[] {"UCX_RNDV_THRESH", "UCX_RNDV_SEND_NBR_THRESH", "UCX_MM_SEG_SIZE",
                "UCX_POSIX_SEG_SIZE", "UCX_SYSV_SEG_SIZE", "UCX_MM_FIFO_SIZE", "UCX_POSIX_FIFO_SIZE",
                "UCX_SYSV_FIFO_SIZE"}) {
            assumeTrue(ConfigAndInfoTest.startupEnv(v) == null, v + " is set in the environment");
        }
        CallerModeTest.withCallerClient((a, receiver, sender) -> {
            assumeTrue(sharedMemoryOnly(sender), "lanes: " + sender.info());
            // UCX's first protocols print a row of thresholds per operation; ucx4j says where it asks for eager sends
            assertEquals(sender.info().contains("tag_send: "), sender.info().contains(EAGER_LINE), sender.info());
            try (Arena arena = Arena.ofConfined()) {
                Sent sent = send(arena, receiver, sender);
                CompletableFuture<Long> tag = sent.tag(), am = sent.am();
                assertEquals(TAG_SIZE, tag.get(10, TimeUnit.SECONDS)); // the receiver's worker has not moved
                assertEquals(AM_SIZE, am.get(10, TimeUnit.SECONDS));
                received(arena, receiver);
            }
        });
    }

    /**
     * With receive FIFOs of more than 64 slots (UCX 1.16's 256, set here on an older UCX) tag sends keep UCX's
     * rendezvous, while active messages still go eagerly: with such a FIFO on UCX 1.13 a receiver whose eager tag
     * messages arrived before its receives fell behind for good, and its shared memory grew without bound.
     */
    @Test
    void aFifoLargerThanUcxsOldDefaultKeepsTagSendsWaitingForTheReceiver() throws Throwable {
        for (String v : new String[] {"UCX_RNDV_THRESH", "UCX_RNDV_SEND_NBR_THRESH", "UCX_MM_SEG_SIZE",
                "UCX_POSIX_SEG_SIZE", "UCX_SYSV_SEG_SIZE", "UCX_MM_FIFO_SIZE"}) {
            assumeTrue(ConfigAndInfoTest.startupEnv(v) == null, v + " is set in the environment");
        }
        String[] keys = {"UCX_POSIX_FIFO_SIZE", "UCX_SYSV_FIFO_SIZE"};
        String[] was = {ConfigAndInfoTest.nativeGetenv(keys[0]), ConfigAndInfoTest.nativeGetenv(keys[1])};
        UcxOptions options = UcxOptions.defaults().with("POSIX_FIFO_SIZE", "256").with("SYSV_FIFO_SIZE", "256");
        try {
            CallerModeTest.withCallerClient(options, (a, receiver, sender) -> {
                assumeTrue(sharedMemoryOnly(sender), "lanes: " + sender.info());
                assumeTrue(sender.info().contains("tag_send: "), "UCX's first protocols (before 1.16)");
                assertFalse(sender.info().contains(EAGER_LINE), sender.info());
                assertTrue(sender.info().contains("# ucx4j eager sends: am_send is eager up to"), sender.info());
                try (Arena arena = Arena.ofConfined()) {
                    Sent sent = send(arena, receiver, sender);
                    CompletableFuture<Long> tag = sent.tag(), am = sent.am();
                    assertEquals(AM_SIZE, am.get(10, TimeUnit.SECONDS)); // the receiver's worker has not moved
                    Thread.sleep(300);
                    assertFalse(tag.isDone(), "a tag send completed with its receiver idle: " + tag);
                    received(arena, receiver);
                    assertEquals(TAG_SIZE, tag.get(10, TimeUnit.SECONDS));
                }
            });
        } finally {
            // the environment is the process's: later tests (and the peers they start) get what they had
            for (int i = 0; i < keys.length; i++) {
                if (was[i] == null) {
                    ConfigAndInfoTest.nativeUnsetenv(keys[i]);
                } else {
                    Ucx.open(UcxOptions.defaults().with(keys[i].substring(4), was[i])).close();
                }
                assertEquals(was[i], ConfigAndInfoTest.nativeGetenv(keys[i]), keys[i]);
            }
        }
    }

    /** An explicit rendezvous threshold, or eager sends turned off: UCX's own choice, rendezvous from 32 KiB. */
    @ParameterizedTest
    @ValueSource(booleans = {true, false})
    void anApplicationsRendezvousThresholdOrItsOptOutKeepsThemWaitingForTheReceiver(boolean threshold)
            throws Exception {
        UcxOptions options = threshold ? UcxOptions.defaults().with("RNDV_THRESH", "32k")
                : UcxOptions.defaults().withEagerSends(false);
        CallerModeTest.withCallerClient(options, (a, receiver, sender) -> {
            assertFalse(sender.info().contains(EAGER_LINE), sender.info());
            // UCX 1.16 and later choose eager sends over shared memory themselves: only a threshold overrides them
            assumeTrue(threshold || sender.info().contains("tag_send: "), "UCX's own choice is eager here");
            try (Arena arena = Arena.ofConfined()) {
                Sent sent = send(arena, receiver, sender);
                CompletableFuture<Long> tag = sent.tag(), am = sent.am();
                Thread.sleep(300);
                assertFalse(tag.isDone(), "a rendezvous send completed with its receiver idle: " + tag);
                assertFalse(am.isDone(), "a rendezvous active message completed with its receiver idle: " + am);
                received(arena, receiver); // the receiver's calls drive its worker: both rendezvous run now
                assertEquals(TAG_SIZE, tag.get(10, TimeUnit.SECONDS));
                assertEquals(AM_SIZE, am.get(10, TimeUnit.SECONDS));
            }
        });
    }

    /**
     * One active message the receiver takes: an active message beyond UCX's short protocol carries the receiving
     * endpoint's id, which UCX learns from the receiver's first answer (before it, the send waits for the receiver
     * either way).
     */
    private static void firstActiveMessage(Arena arena, Endpoint receiver, Endpoint sender) throws Exception {
        CompletableFuture<Long> first = sender.amSendAsync(MemorySegment.ofArray(new byte[0]),
                Data.pattern(arena, 4096, 3));
        try (AmMessage m = receiver.amRecv(CallerModeTest.T)) {
            Data.verify(m.payload(), 4096, 3);
        }
        assertEquals(4096, first.get(10, TimeUnit.SECONDS));
    }

    /** A tag message and an active message in flight, sent after {@link #firstActiveMessage}. */
    private record Sent(CompletableFuture<Long> tag, CompletableFuture<Long> am) {}

    /** {@link #firstActiveMessage}, then a {@link #TAG_SIZE} tag message and an {@link #AM_SIZE} active message. */
    private static Sent send(Arena arena, Endpoint receiver, Endpoint sender) throws Exception {
        firstActiveMessage(arena, receiver, sender);
        CompletableFuture<Long> tag = sender.sendAsync(Data.pattern(arena, TAG_SIZE, 1), TAG);
        CompletableFuture<Long> am = sender.amSendAsync(MemorySegment.ofArray(new byte[] {9}),
                Data.pattern(arena, AM_SIZE, 2));
        return new Sent(tag, am);
    }

    /** The receiver takes both messages and checks every byte. */
    private static void received(Arena arena, Endpoint receiver) {
        MemorySegment in = arena.allocate(TAG_SIZE);
        assertEquals(TAG_SIZE, receiver.recv(in, TAG, CallerModeTest.T));
        Data.verify(in, TAG_SIZE, 1);
        try (AmMessage m = receiver.amRecv(CallerModeTest.T)) {
            assertEquals(1, m.header().byteSize());
            Data.verify(m.payload(), AM_SIZE, 2);
        }
    }

    /** Whether every lane of the endpoint is a shared-memory FIFO (not so with {@code UCX_TLS=tcp}, for one). */
    private static boolean sharedMemoryOnly(Endpoint ep) {
        return java.util.regex.Pattern.compile("(?m)^#\\s*lane\\[\\d+\\]:\\s+\\d+:(\\S+)").matcher(ep.info())
                .results().allMatch(r -> r.group(1).startsWith("posix/") || r.group(1).startsWith("sysv/"));
    }
}
