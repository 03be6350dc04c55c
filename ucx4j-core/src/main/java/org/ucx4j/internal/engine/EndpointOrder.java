package org.ucx4j.internal.engine;

import java.nio.ByteBuffer;
import java.util.HashMap;
import java.util.Map;
import java.util.TreeMap;
import java.util.function.Consumer;
import org.ucx4j.UcxException;
import org.ucx4j.internal.ffi.Status;

/**
 * The order in which a worker creates its UCX endpoints to each peer worker (owner thread only).
 *
 * <p>UCX pairs the endpoints two workers create to each other's address by order: a worker's k-th endpoint to a peer
 * worker is wired to the peer's k-th endpoint to it (UCX's per-peer connection sequence number). Connections set up
 * at the same time between the same two workers, or one that fails after one side created its endpoint, would
 * otherwise cross: one connection's stream bytes, rendezvous replies and failures would land on another. So, for
 * each pair of workers, the one with the lower address (the arbiter) creates its endpoint for a connection first and
 * sends the other its number (the ticket) in the handshake; the other side creates its endpoints in ticket order,
 * and fills the number of a connection that failed before its ticket arrived with an endpoint it closes at once.
 * The other side announces each handshake that will wait for a ticket before the arbiter can issue it, so a number
 * is filled only once no ticket can still arrive for it.
 */
final class EndpointOrder {
    /** A connection waiting for its turn to create its endpoint. */
    record Ticket(EndpointCore endpoint, byte[] peerAddress, SafeFuture<EndpointCore> future) {}

    /** What the engine does when a number comes up. */
    interface Creator {
        /** Creates the ticket's endpoint; calls {@link #next} exactly once. */
        void create(Ticket t);

        /** Creates an endpoint to {@code peerAddress} and closes it at once; calls {@link #next} exactly once. */
        void fill(byte[] peerAddress);
    }

    private static final class Peer {
        /** Endpoints this worker created to the peer so far: the number UCX gives the next one. */
        long created;
        /** Handshakes with the peer that wait for their ticket. */
        int awaiting;
        /** Tickets that arrived before their turn. */
        final TreeMap<Long, Ticket> pending = new TreeMap<>();
        /** The highest number the peer confirmed it created an endpoint for (arbiter side); -1: none yet. */
        long confirmed = -1;
    }

    /** By a digest of the peer's worker address (an address can be large; one entry per peer worker, as in UCX). */
    private final Map<ByteBuffer, Peer> peers = new HashMap<>();

    private Peer peer(byte[] address) {
        return peers.computeIfAbsent(ByteBuffer.wrap(digest(address)), k -> new Peer());
    }

    private static byte[] digest(byte[] address) {
        try {
            return java.security.MessageDigest.getInstance("SHA-256").digest(address);
        } catch (java.security.NoSuchAlgorithmException e) {
            throw new IllegalStateException("SHA-256 unavailable", e);
        }
    }

    /** Counts an endpoint about to be created to {@code peerAddress} (every path); returns its number. */
    long next(byte[] peerAddress) {
        return peer(peerAddress).created++;
    }

    /** The peer confirmed it created its endpoint {@code number}, and so every lower one (it creates in order). */
    void confirmed(byte[] peerAddress, long number) {
        Peer p = peer(peerAddress);
        p.confirmed = Math.max(p.confirmed, number);
    }

    /** Whether the peer has created or filled its endpoint {@code number}, as far as its confirmations tell. */
    boolean filled(byte[] peerAddress, long number) {
        return number < peer(peerAddress).confirmed;
    }

    /** A handshake with the peer will wait for a ticket (announced before the arbiter may issue it). */
    void expect(byte[] peerAddress) {
        peer(peerAddress).awaiting++;
    }

    /** A handshake that waited for a ticket failed before it arrived. */
    void lost(byte[] peerAddress, Creator creator) {
        Peer p = peer(peerAddress);
        p.awaiting--;
        advance(peerAddress, p, creator);
    }

    /**
     * Ticket {@code number} arrived for {@code t}: its endpoint is created in turn. A number UCX cannot give
     * ({@code >= limit}), one this side has passed, or one already waiting fails the connection.
     */
    void arrived(long number, long limit, Ticket t, Creator creator) {
        Peer p = peer(t.peerAddress());
        p.awaiting--;
        // far ahead of anything lost handshakes could explain: a peer that would have this side fill thousands of
        // endpoints (and spend the pair's 16-bit numbers) is out of step too
        if (number < p.created || number >= limit || number - p.created > MAX_AHEAD + p.awaiting
                || p.pending.containsKey(number)) {
            outOfStep(t, number, p.created);
        } else {
            p.pending.put(number, t);
        }
        advance(t.peerAddress(), p, creator);
    }

    /** How many numbers beyond this side's count a ticket may be (each gap a handshake lost on the way). */
    static final long MAX_AHEAD = 1024;

    private static void outOfStep(Ticket t, long number, long created) {
        t.future().completeExceptionally(new UcxException("connection failed: the peer's endpoint number " + number
                + " is out of step with this side's " + created + " (raw endpoints to the same worker?) ("
                + Status.name(Status.ERR_INVALID_PARAM) + ")", Status.ERR_INVALID_PARAM));
    }

    private static void advance(byte[] peerAddress, Peer p, Creator creator) {
        while (!p.pending.isEmpty()) {
            long number = p.created;
            if (p.pending.firstKey() < number) { // passed meanwhile (a raw endpoint to the same worker)
                Map.Entry<Long, Ticket> stale = p.pending.pollFirstEntry();
                outOfStep(stale.getValue(), stale.getKey(), number);
                continue;
            }
            Ticket t = p.pending.remove(number);
            if (t != null) {
                creator.create(t);
            } else if (p.awaiting == 0) {
                creator.fill(peerAddress); // no handshake can still bring this number: its connection failed
            } else {
                return;
            }
            if (p.created == number) {
                p.created++; // a creator that threw before counting: never loop on one number
            }
        }
    }

    /** The worker stops: hands each connection still waiting for its turn to {@code fail}. */
    void failPending(Consumer<Ticket> fail) {
        for (Peer p : peers.values()) {
            p.pending.values().forEach(fail);
            p.pending.clear();
        }
    }
}
