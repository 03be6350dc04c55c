package org.ucx4j.internal.engine;

/**
 * Operations UCX holds a request for, linked through the ops themselves ({@code Op.pendingPrev}/{@code pendingNext},
 * so adding and removing allocate nothing): an endpoint's, which fail or are canceled with it, or the worker-level
 * receives, canceled when the worker closes. Owner thread only.
 */
final class PendingOps {
    /** The most recently added op, or null; iterate with {@code Op.pendingNext}. */
    Op head;

    void add(Op op) {
        op.pendingPrev = null;
        op.pendingNext = head;
        if (head != null) {
            head.pendingPrev = op;
        }
        head = op;
    }

    /**
     * The ops linked now, newest first: what a loop that cancels them walks, since canceling may unlink an op (UCX
     * completes a canceled receive inside {@code ucp_request_cancel}) and so end a walk of the links themselves.
     */
    Op[] snapshot() {
        int n = 0;
        for (Op op = head; op != null; op = op.pendingNext) {
            n++;
        }
        Op[] all = new Op[n];
        int i = 0;
        for (Op op = head; op != null; op = op.pendingNext) {
            all[i++] = op;
        }
        return all;
    }

    /** Unlinks {@code op}; nothing if it is not in this list. */
    void remove(Op op) {
        if (op.pendingPrev == null && head != op) {
            return; // not linked
        }
        if (op.pendingPrev != null) {
            op.pendingPrev.pendingNext = op.pendingNext;
        } else {
            head = op.pendingNext;
        }
        if (op.pendingNext != null) {
            op.pendingNext.pendingPrev = op.pendingPrev;
        }
        op.pendingPrev = op.pendingNext = null;
    }
}
