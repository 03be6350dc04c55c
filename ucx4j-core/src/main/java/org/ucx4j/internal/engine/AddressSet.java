package org.ucx4j.internal.engine;

/**
 * A set of native addresses for one thread: open addressing with linear probing (0 marks a free slot, so 0 is never
 * a member) and backward-shift deletion, kept at most half full. It allocates only when it grows past the most
 * members it ever held at once.
 */
final class AddressSet {
    private long[] table = new long[64];
    private int size;

    /** Adds {@code p} (not 0, not a member). */
    void add(long p) {
        if (2 * (size + 1) > table.length) {
            long[] old = table;
            table = new long[old.length * 2];
            for (long q : old) {
                if (q != 0) {
                    insert(table, q);
                }
            }
        }
        insert(table, p);
        size++;
    }

    /** Removes {@code p}; whether it was a member. */
    boolean remove(long p) {
        long[] t = table;
        int mask = t.length - 1;
        int i = slot(p, mask);
        while (t[i] != p) {
            if (t[i] == 0) {
                return false;
            }
            i = (i + 1) & mask;
        }
        // later members of the probe run move up into the gap where their lookup would otherwise stop short
        int gap = i;
        for (int j = (i + 1) & mask; t[j] != 0; j = (j + 1) & mask) {
            if (((j - slot(t[j], mask)) & mask) >= ((j - gap) & mask)) {
                t[gap] = t[j];
                gap = j;
            }
        }
        t[gap] = 0;
        size--;
        return true;
    }

    int size() {
        return size;
    }

    /** The members, in no order (a copy). */
    long[] toArray() {
        long[] members = new long[size];
        int n = 0;
        for (long p : table) {
            if (p != 0) {
                members[n++] = p;
            }
        }
        return members;
    }

    private static void insert(long[] t, long p) {
        int mask = t.length - 1;
        int i = slot(p, mask);
        while (t[i] != 0) {
            i = (i + 1) & mask;
        }
        t[i] = p;
    }

    private static int slot(long p, int mask) {
        return (int) ((p * 0x9E3779B97F4A7C15L) >>> 40) & mask; // Fibonacci hashing: aligned addresses spread too
    }
}
