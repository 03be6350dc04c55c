package org.ucx4j.internal.engine;

import java.util.concurrent.Executor;

/**
 * A future that is complete from birth and cannot be changed: handed back for sends UCX completed inside the call,
 * so one instance can serve many of them. {@code complete}, {@code cancel} and the like return false (as on any
 * completed future); the {@code obtrude} methods, which would rewrite the result, are refused.
 */
final class DoneFuture extends SafeFuture<Long> {
    final long value;

    DoneFuture(Executor executor, long value) {
        super(executor);
        this.value = value;
        super.complete(value);
    }

    @Override
    public boolean complete(Long v) {
        return false;
    }

    @Override
    public boolean completeExceptionally(Throwable ex) {
        return false;
    }

    @Override
    public void obtrudeValue(Long v) {
        throw new UnsupportedOperationException("a completed ucx4j send cannot be rewritten");
    }

    @Override
    public void obtrudeException(Throwable ex) {
        throw new UnsupportedOperationException("a completed ucx4j send cannot be rewritten");
    }
}
