package org.apache.spark.shuffle.ucx4j;

import java.util.function.BooleanSupplier;

/** Test helpers. */
final class Data {
    private Data() {
    }

    /** Waits up to 30 s for a condition that becomes true asynchronously. */
    static void eventually(BooleanSupplier condition) {
        long deadline = System.nanoTime() + 30_000_000_000L;
        while (!condition.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                throw new AssertionError("condition not met within 30 s");
            }
            try {
                Thread.sleep(50);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new AssertionError(e);
            }
        }
    }
}
