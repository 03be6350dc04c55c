package org.ucx4j.internal.engine;

import java.util.Arrays;

/**
 * The operations UCX holds a request for, by slot number (owner thread only): the slot travels to UCX as the
 * callback's user data ({@link Upcalls#userData}), so a completion finds its op without a map or an allocation.
 * Free slots are a stack; the table doubles when it runs out.
 */
final class OpSlots {
    private Op[] ops = new Op[256];
    private int[] free = new int[256];
    private int top;

    OpSlots() {
        for (int i = 0; i < free.length; i++) {
            free[i] = free.length - 1 - i;
        }
        top = free.length;
    }

    /** A free slot that holds no op yet (a send made inside the call: it gets one only if UCX keeps a request). */
    int reserve() {
        if (top == 0) {
            grow();
        }
        return free[--top];
    }

    /** Puts {@code op} into slot {@code s} (reserved, or freshly taken). */
    void put(int s, Op op) {
        ops[s] = op;
        op.slot = s;
    }

    /** Takes a free slot for {@code op}. */
    int alloc(Op op) {
        int s = reserve();
        put(s, op);
        return s;
    }

    Op get(int s) {
        return ops[s];
    }

    /** Frees slot {@code s}; its op, if any, no longer names it. */
    void release(int s) {
        Op op = ops[s];
        if (op != null) {
            op.slot = -1;
        }
        ops[s] = null;
        free[top++] = s;
    }

    /** Whether any slot is taken (an operation UCX may still complete). */
    boolean anyTaken() {
        return top < ops.length;
    }

    /** Whether any slot holds an op. */
    boolean anyOp() {
        for (Op op : ops) {
            if (op != null) {
                return true;
            }
        }
        return false;
    }

    /** The table itself, for a scan (null entries are free or reserved slots); do not keep it. */
    Op[] table() {
        return ops;
    }

    private void grow() {
        int old = ops.length;
        ops = Arrays.copyOf(ops, old * 2);
        free = new int[old * 2];
        for (int i = 0; i < old; i++) {
            free[i] = old * 2 - 1 - i;
        }
        top = old;
    }
}
