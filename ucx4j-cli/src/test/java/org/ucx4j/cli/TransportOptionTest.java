package org.ucx4j.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

import org.junit.jupiter.api.Test;

/** {@code --transport} of the benchmarks: the UCX_TLS both UCX stacks get. */
class TransportOptionTest {
    @Test
    void eachTransportNamesTheUcxTransportsItAllows() {
        assertNull(SendRecvBench.tls("auto"), "UCX's own choice");
        assertEquals("tcp", SendRecvBench.tls("tcp"));
        assertEquals("shm,tcp", SendRecvBench.tls("shm"));
        assertThrows(IllegalArgumentException.class, () -> SendRecvBench.tls("rdma"));
    }
}
