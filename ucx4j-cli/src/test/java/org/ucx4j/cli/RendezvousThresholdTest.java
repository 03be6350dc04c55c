package org.ucx4j.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;

import org.junit.jupiter.api.Test;

/**
 * The benchmark server posts tag receives ahead only from UCX's rendezvous threshold on, read from
 * {@code ucp_ep_print_info}: the {@code tag_send:} row, not the {@code tag_send_nbr:} or {@code tag_send_sync:}
 * ones, unless ucx4j's own last line says its sends take the {@code tag_send_nbr:} thresholds, and the old fixed
 * threshold where the text has no such row.
 */
class RendezvousThresholdTest {
    // as UCX 1.13.1 prints a shared-memory endpoint with 32 KiB segments
    private static final String UCX_1_13 = """
            #
            # UCP endpoint
            #
            #               peer: <no debug data>
            #                 lane[0]:  4:posix/memory.0 md[3]          -> md[3]/posix/sysdev[255] am am_bw#0 keepalive
            #
            #            tag_send_nbr: 0..<egr/short>..93..<egr/bcopy>..262144..<rndv>..(inf)
            #                tag_send: 0..<egr/short>..93..<egr/bcopy>..32832..<rndv>..(inf)
            #           tag_send_sync: 0..<egr/short>..93..<egr/bcopy>..16384..<rndv>..(inf)
            #             stream_send: 0..<egr/short>..93..<egr/bcopy>..(inf)
            """;

    @Test
    void readsTheTagSendRowOnly() {
        assertEquals(32832, UcxRuns.rendezvousFrom(UCX_1_13));
    }

    @Test
    void readsTheTagSendNbrRowWhereUcx4jSaysItsSendsTakeIt() {
        String eager = UCX_1_13 + "# ucx4j eager sends: tag_send takes the tag_send_nbr thresholds "
                + "(UCP_OP_ATTR_FLAG_FAST_CMPL); am_send is eager up to 524288 B\n";
        assertEquals(262144, UcxRuns.rendezvousFrom(eager));
    }

    @Test
    void noRendezvousInTheRowOrNoRowIsUnknown() {
        assertEquals(-1, UcxRuns.rendezvousFrom("#   tag_send: 0..<egr/short>..93..<egr/bcopy>..(inf)\n"
                + "#   am_send: 0..<egr/short>..93..<egr/bcopy>..8192..<rndv>..(inf)\n"));
        assertEquals(-1, UcxRuns.rendezvousFrom("# tag_send from host memory:\n#   0..92  eager short\n"));
        assertEquals(-1, UcxRuns.rendezvousFrom(""));
    }
}
