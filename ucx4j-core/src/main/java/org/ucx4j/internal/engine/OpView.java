package org.ucx4j.internal.engine;

import java.util.concurrent.CompletionException;
import java.util.function.LongFunction;

/**
 * A future of another type over an async operation (a worker-level receive's {@code TagMessage}) that ends only as
 * its operation does: a cancel withdraws the operation, and an outcome set from outside ({@code complete},
 * {@code orTimeout}...) is passed to the operation ({@link Op#complete}), which takes it once UCX has let go of the
 * caller's memory; a message that matched first wins.
 */
public final class OpView<T> extends EngineFuture<T> {
    /** Marks an operation ended by a value asked for on this view (the value itself is kept here). */
    private static final Throwable ASKED_VALUE = new RuntimeException("a value asked for from outside", null, false,
            false) {};

    private final Op op;
    /** The first value asked for from outside, boxed (it may be null), or null. */
    private final java.util.concurrent.atomic.AtomicReference<Object[]> askedValue =
            new java.util.concurrent.atomic.AtomicReference<>();

    /** A view of {@code op} (submitted or not yet) whose result is {@code result} of the operation's length. */
    public OpView(Engine engine, Op op, LongFunction<T> result) {
        super(engine); // waiting on it drives the worker, as waiting on the op would
        this.op = op;
        op.whenDoneHere((len, e) -> { // ucx4j's own code: where the op completes; dependents go to the executor
            Throwable cause = e instanceof CompletionException && e.getCause() != null ? e.getCause() : e;
            if (e == null) {
                super.complete(result.apply(len));
            } else if (e == ASKED_VALUE) {
                @SuppressWarnings("unchecked")
                T v = (T) askedValue.get()[0];
                super.complete(v);
            } else {
                super.completeExceptionally(cause);
            }
        });
    }

    @Override
    public boolean cancel(boolean mayInterruptIfRunning) {
        // withdraw the operation itself, not only this view of it
        return op.cancel(mayInterruptIfRunning) && super.cancel(mayInterruptIfRunning);
    }

    @Override
    public boolean complete(T value) {
        if (isDone()) {
            return false;
        }
        // the first value asked for is kept; it is read after the op's completion, which this write happens before
        if (askedValue.compareAndSet(null, new Object[] {value})) {
            op.completeExceptionally(ASKED_VALUE);
        }
        return false; // this view completes with the operation
    }

    @Override
    public boolean completeExceptionally(Throwable ex) {
        java.util.Objects.requireNonNull(ex);
        if (!isDone()) {
            op.completeExceptionally(ex);
        }
        return false;
    }

    @Override
    public void obtrudeValue(T value) {
        if (op.isDone() && isDone()) {
            super.obtrudeValue(value);
        } else {
            complete(value);
        }
    }

    @Override
    public void obtrudeException(Throwable ex) {
        if (op.isDone() && isDone()) {
            super.obtrudeException(ex);
        } else {
            completeExceptionally(ex);
        }
    }
}
