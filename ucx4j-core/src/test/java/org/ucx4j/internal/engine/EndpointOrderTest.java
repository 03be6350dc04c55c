package org.ucx4j.internal.engine;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The numbering both sides of a worker pair agree on, without UCX: which endpoint is created or filled when. */
@org.junit.jupiter.api.Timeout(value = 10, threadMode = org.junit.jupiter.api.Timeout.ThreadMode.SEPARATE_THREAD)
class EndpointOrderTest {
    private static final byte[] PEER = {1, 2, 3};
    private static final long LIMIT = 65535;

    /** Records what the engine would do; counts every creation as UCX does. */
    private final List<String> created = new ArrayList<>();
    private final EndpointOrder order = new EndpointOrder();
    private final EndpointOrder.Creator creator = new EndpointOrder.Creator() {
        @Override
        public void create(EndpointOrder.Ticket t) {
            created.add("open " + order.next(t.peerAddress()));
            t.future().complete(null);
        }

        @Override
        public void fill(byte[] peerAddress) {
            created.add("fill " + order.next(peerAddress));
        }
    };

    private static EndpointOrder.Ticket ticket() {
        return new EndpointOrder.Ticket(null, PEER, new SafeFuture<>(Runnable::run));
    }

    @Test
    void numbersArrivingOutOfOrderAreCreatedInOrder() {
        order.expect(PEER);
        order.expect(PEER);
        EndpointOrder.Ticket second = ticket(), first = ticket();
        order.arrived(1, LIMIT, second, creator);
        assertEquals(List.of(), created, "number 1 waits for number 0, whose handshake is still under way");
        order.arrived(0, LIMIT, first, creator);
        assertEquals(List.of("open 0", "open 1"), created);
        assertTrue(first.future().isDone() && second.future().isDone());
    }

    @Test
    void aNumberWhoseHandshakeWasLostIsFilledOnceNoHandshakeCanBringIt() {
        order.expect(PEER);
        order.expect(PEER);
        order.arrived(1, LIMIT, ticket(), creator);
        assertEquals(List.of(), created);
        order.lost(PEER, creator); // number 0's handshake failed before its number arrived
        assertEquals(List.of("fill 0", "open 1"), created);
    }

    @Test
    void aNumberFarAheadFailsItsConnectionInsteadOfFillingThousands() {
        order.expect(PEER);
        EndpointOrder.Ticket far = ticket();
        order.arrived(60000, LIMIT, far, creator);
        assertTrue(far.future().isCompletedExceptionally(), "a number 60000 ahead was accepted");
        assertEquals(List.of(), created, "nothing filled for it");
        // a gap lost handshakes can explain is still waited for and filled
        order.expect(PEER);
        EndpointOrder.Ticket near = ticket();
        order.arrived(3, LIMIT, near, creator);
        assertEquals(List.of("fill 0", "fill 1", "fill 2", "open 3"), created);
        assertTrue(near.future().isDone() && !near.future().isCompletedExceptionally());
    }

    @Test
    void numbersThisSideHasPassedFailTheirConnectionsInsteadOfLooping() {
        order.expect(PEER);
        order.expect(PEER);
        EndpointOrder.Ticket waiting = ticket(), late = ticket();
        order.arrived(1, LIMIT, waiting, creator); // waits for number 0
        order.next(PEER); // two raw endpoints to the same worker take 0 and 1 meanwhile
        order.next(PEER);
        order.arrived(0, LIMIT, late, creator);
        assertTrue(late.future().isCompletedExceptionally(), "a passed number fails its connection");
        assertTrue(waiting.future().isCompletedExceptionally(), "so does one passed while it waited");
        assertEquals(List.of(), created, "and nothing is filled");
        assertEquals(2, order.next(PEER));
    }

    @Test
    void aNumberUcxCannotGiveIsRefusedWithoutFilling() {
        order.expect(PEER);
        EndpointOrder.Ticket forged = ticket();
        order.arrived(Long.MAX_VALUE, LIMIT, forged, creator);
        assertTrue(forged.future().isCompletedExceptionally());
        assertEquals(List.of(), created, "nothing filled up to a forged number");
        assertEquals(0, order.next(PEER), "the count is untouched");
    }
}
