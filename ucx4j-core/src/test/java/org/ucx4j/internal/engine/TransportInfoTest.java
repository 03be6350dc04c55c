package org.ucx4j.internal.engine;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import org.junit.jupiter.api.Test;

/** UCX's context and endpoint descriptions, as UCX 1.13 to 1.20 print them, read into transport names. */
class TransportInfoTest {
    @Test
    void everyResourceIsReadAuxiliaryOnesToo() {
        // the flags column: '-' or 'a' (an auxiliary transport, e.g. ud_verbs beside rc), then '-' or 's' (1.13)
        String info = """
                #
                #      resource 0  :  md 0  dev 0  flags -- rc_mlx5/mlx5_0:1
                #      resource 1  :  md 0  dev 0  flags a- ud_verbs/mlx5_0:1
                #      resource 2  :  md 1  dev 1  flags -- posix/memory
                #      resource 3  :  md 2  dev 2  flags -s tcp/eth0
                #
                """;
        assertEquals(List.of("rc_mlx5/mlx5_0:1", "ud_verbs/mlx5_0:1", "posix/memory", "tcp/eth0"),
                TransportInfo.resources(info));
    }

    @Test
    void theFirstProtocolsAreToldFromTheirThresholdRowsAndFifosFromTransportsThatMapMemory() {
        String first = """
                #                 lane[0]:  4:posix/memory.0 md[3]          -> md[3]/posix/sysdev[255] am am_bw#0 keepalive
                #
                #                tag_send: 0..<egr/short>..93..<egr/bcopy>..32832..<rndv>..(inf)
                #            tag_send_nbr: 0..<egr/short>..93..<egr/bcopy>..262144..<rndv>..(inf)
                """;
        String second = """
                #                 lane[0]:  4:posix/memory.0 md[3]          -> md[3]/posix/sysdev[255] seg 32832 am keepalive
                # | ucx4j-2 intra-node cfg#0 | tagged message by ucp_tag_send* from host memory          |
                # |            32825..553108 | multi-frag eager copy-in copy-out          | posix/memory |
                """;
        assertTrue(TransportInfo.firstProtocols(first));
        assertFalse(TransportInfo.firstProtocols(second));
        assertEquals(List.of("posix/memory"), TransportInfo.lanes(first));
        assertTrue(TransportInfo.isFifo("posix/memory"));
        assertTrue(TransportInfo.isFifo("sysv/memory"));
        assertFalse(TransportInfo.isFifo("xpmem/memory")); // maps the peer's memory: zero-copy rendezvous
        assertFalse(TransportInfo.isFifo("cma/memory"));
        assertFalse(TransportInfo.isFifo("tcp/lo"));
    }
}
