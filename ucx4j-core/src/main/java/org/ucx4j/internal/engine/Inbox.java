package org.ucx4j.internal.engine;

import java.util.ArrayDeque;
import org.ucx4j.UcxException;

/**
 * Receiver-allocated messages of one kind on one endpoint (or on the worker, for raw peers) and the receives
 * waiting for them. Owner thread only. An entry is an {@link AmData}, an object that arrived whole (the {@code byte[]}
 * its receive hands back: nothing else is allocated for it), or the {@link UcxException} that replaced a message
 * that could not be taken (over a cap, allocation failed, transfer lost), so the receive that would have got it
 * fails instead of waiting forever.
 */
final class Inbox {
    /** Whose inbox this is; null for raw peers' messages (the worker's). */
    private final EndpointCore ep;
    private final ArrayDeque<Object> ready = new ArrayDeque<>();
    private final ArrayDeque<SafeFuture<AmData>> waiters = new ArrayDeque<>();
    /**
     * Arrival order (owner thread): while a rendezvous message's pull is unfinished, it and every later message of
     * this inbox wait here, so messages are delivered in the order they arrived. Entries: the pull's {@link Op}, or a
     * finished message ({@link AmData}) or error ({@link UcxException}) that arrived after one.
     */
    final ArrayDeque<Object> inOrder = new ArrayDeque<>();

    Inbox(EndpointCore ep) {
        this.ep = ep;
    }

    /** Hands {@code entry} to the oldest live waiter, or keeps it. */
    void deliver(Object entry) {
        hand(entry, false);
    }

    /**
     * Hands {@code entry}, which a receive gave up just as it got it, to the oldest live waiter, or keeps it ahead
     * of what arrived after it.
     */
    void deliverFirst(Object entry) {
        hand(entry, true);
    }

    private void hand(Object entry, boolean first) {
        SafeFuture<AmData> w;
        while ((w = waiters.poll()) != null) {
            if (offer(w, entry)) {
                return;
            }
        }
        if (first) {
            ready.addFirst(entry);
        } else {
            ready.add(entry);
        }
    }

    /** The oldest entry nobody waited for, or null (owner thread). */
    Object poll() {
        return ready.poll();
    }

    /** Completes {@code f} from what is ready, or fails it with {@code unusable}, or queues it. */
    void take(SafeFuture<AmData> f, UcxException unusable) {
        Object entry = ready.poll();
        if (entry != null) {
            if (!offer(f, entry)) {
                ready.addFirst(entry); // the caller gave up meanwhile
            }
        } else if (unusable != null) {
            f.completeExceptionally(unusable);
        } else {
            if (!waiters.isEmpty()) {
                waiters.removeIf(SafeFuture::isDone); // receives that timed out or were canceled meanwhile
            }
            waiters.add(f);
        }
    }

    private boolean offer(SafeFuture<AmData> f, Object entry) {
        if (entry instanceof AmData m) {
            return f.complete(m);
        }
        if (entry instanceof byte[] object) {
            return f.complete(new AmData(object, ep)); // a receive on a future: wrapped, as it returns
        }
        return f.completeExceptionally((UcxException) entry);
    }

    /** Messages (or the errors that replaced them) waiting here to be received (tests). */
    int ready() {
        return ready.size();
    }

    /** Receives waiting here now (tests). */
    int waiting() {
        return waiters.size();
    }

    /** Fails every waiting receive (the endpoint is gone); what already arrived stays readable. */
    void failWaiters(RuntimeException e) {
        SafeFuture<AmData> w;
        while ((w = waiters.poll()) != null) {
            w.completeExceptionally(e);
        }
    }

    /** True when nothing waits here to be read (owner thread). */
    boolean isEmpty() {
        return ready.isEmpty() && inOrder.isEmpty();
    }

    /** Frees what nobody took (the endpoint or the worker closed). */
    void clear() {
        Object entry;
        while ((entry = ready.poll()) != null || (entry = inOrder.poll()) != null) {
            if (entry instanceof Op op && op.done) { // a finished pull still waiting its turn
                entry = op.attachment;
                op.attachment = null;
            }
            if (entry instanceof AmData m) {
                m.free();
            }
        }
    }
}
