package org.ucx4j.internal.engine;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;

/**
 * Unbounded multi-producer single-consumer queue whose nodes are the operations themselves (Vyukov's intrusive
 * MPSC queue): offering allocates nothing and takes no lock. Any thread offers; only the thread that owns the
 * worker polls.
 */
final class OpQueue {
    private static final VarHandle HEAD;
    private static final VarHandle NEXT;

    static {
        try {
            MethodHandles.Lookup l = MethodHandles.lookup();
            HEAD = l.findVarHandle(OpQueue.class, "head", Op.class);
            NEXT = MethodHandles.privateLookupIn(Op.class, l).findVarHandle(Op.class, "next", Op.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    private final Op stub = Op.stub();
    @SuppressWarnings("unused") // accessed through HEAD
    private volatile Op head = stub;
    private Op tail = stub;

    void offer(Op op) {
        NEXT.setRelease(op, (Op) null);
        Op prev = (Op) HEAD.getAndSet(this, op);
        NEXT.setRelease(prev, op);
    }

    /** Consumer only. Null when empty or when a producer is half-way through an offer (it will be seen soon). */
    Op poll() {
        Op t = tail;
        Op next = (Op) NEXT.getAcquire(t);
        if (t == stub) {
            if (next == null) {
                return null;
            }
            tail = next;
            t = next;
            next = (Op) NEXT.getAcquire(next);
        }
        if (next != null) {
            tail = next;
            return t;
        }
        if (t != (Op) HEAD.getVolatile(this)) {
            return null;
        }
        offer(stub);
        next = (Op) NEXT.getAcquire(t);
        if (next != null) {
            tail = next;
            return t;
        }
        return null;
    }

    /** Consumer only: true when nothing was offered that has not been polled. */
    boolean isEmpty() {
        return tail == stub && (Op) HEAD.getVolatile(this) == stub;
    }
}
