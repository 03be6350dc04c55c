package org.ucx4j;

/** What a worker-level tagged receive got: the sender's tag and the number of bytes written. */
public record TagMessage(long tag, long length) {}
