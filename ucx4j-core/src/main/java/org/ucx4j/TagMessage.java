package org.ucx4j;

/**
 * What a worker-level tagged receive got: the sender's tag and the number of bytes written.
 *
 * @param tag the sender's worker-level tag (0 .. 2^63-1)
 * @param length the number of bytes written into the receive buffer
 */
public record TagMessage(long tag, long length) {}
