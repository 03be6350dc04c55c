package org.ucx4j;

/** How the thread that owns a UCX worker waits when there is nothing to do. */
public enum ProgressMode {
    /** A progress thread arms the worker and sleeps on its event fd at once: lowest CPU, adds a wake-up per message. */
    BLOCKING,
    /** A progress thread spins on {@code ucp_worker_progress}: lowest latency, one core busy. */
    POLLING,
    /** Default. A progress thread spins briefly, then yields, then sleeps on the event fd. */
    BACKOFF,
    /**
     * No progress thread: the thread that opened {@link Ucx} owns the worker and progresses it inside its own
     * blocking calls and {@link Ucx#progress()}. Other threads may still submit work; it runs when the owner
     * progresses. For HPC-style loops and the lowest latency.
     */
    CALLER
}
