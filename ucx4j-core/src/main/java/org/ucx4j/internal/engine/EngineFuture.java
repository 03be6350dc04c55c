package org.ucx4j.internal.engine;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Executor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * A {@link SafeFuture} that a worker's owner thread completes and whose waiters drive that worker meanwhile where
 * they can ({@link Engine#help}): {@code get}/{@code join} in caller mode on the owner thread progress it (nobody
 * else would), and any other thread borrows it from the progress thread, as a blocking call does.
 */
public class EngineFuture<T> extends SafeFuture<T> {
    /** The engine whose worker completes this future (null: wait the ordinary way). */
    Engine engine;

    EngineFuture(Executor executor) {
        super(executor);
    }

    /** A future completed by {@code engine}'s worker (ucx4j's own adapters of such futures). */
    public EngineFuture(Engine engine) {
        super(engine.executor);
        this.engine = engine;
    }

    /** The engine of {@code f} when it is an {@link EngineFuture}, else null. */
    public static Engine engineOf(CompletableFuture<?> f) {
        return f instanceof EngineFuture<?> e ? e.engine : null;
    }

    @Override
    public T get() throws InterruptedException, ExecutionException {
        Engine e = engine;
        if (!isDone() && e != null) {
            e.help(this, -1, true);
        }
        return super.get();
    }

    /** {@link #get()} with a timeout: the time spent driving the worker counts against it. */
    @Override
    public T get(long timeout, TimeUnit unit) throws InterruptedException, ExecutionException, TimeoutException {
        Engine e = engine;
        if (isDone() || e == null) {
            return super.get(timeout, unit);
        }
        long nanos = Math.max(0, unit.toNanos(timeout));
        long start = System.nanoTime();
        e.help(this, nanos, true);
        return super.get(Math.max(0, nanos - (System.nanoTime() - start)), TimeUnit.NANOSECONDS);
    }

    /** {@link #get()} for {@link CompletableFuture#join()}, which does not answer interrupts. */
    @Override
    public T join() {
        Engine e = engine;
        if (!isDone() && e != null) {
            e.help(this, -1, false);
        }
        return super.join();
    }

    /**
     * Runs {@code action} where this future completes (or at once, if it has): for ucx4j's own continuations,
     * which run no user code; users' dependents still go to the executor ({@link SafeFuture}).
     */
    public void whenDoneHere(java.util.function.BiConsumer<? super T, ? super Throwable> action) {
        super.whenCompleteAsync(action, Runnable::run);
    }
}
