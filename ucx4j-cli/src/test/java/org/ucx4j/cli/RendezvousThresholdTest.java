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

    /** The line ucx4j's core really writes is the one read above: a live shared-memory endpoint. */
    @Test
    void aLiveEndpointThatSendsEagerlyIsReadAtItsTagSendNbrRow() throws Exception {
        try (org.ucx4j.Ucx a = org.ucx4j.Ucx.open(); org.ucx4j.Ucx b = org.ucx4j.Ucx.open();
                org.ucx4j.Listener l = b.listen(0, ep -> {});
                org.ucx4j.Endpoint ep = a.connect("127.0.0.1", l.port())) {
            String info = ep.info();
            java.util.regex.Matcher nbr = java.util.regex.Pattern
                    .compile("(?m)^#\\s*tag_send_nbr:\\s.*?\\.\\.(\\d+)\\.\\.<rndv>").matcher(info);
            org.junit.jupiter.api.Assumptions.assumeTrue(nbr.find() && ep.transports().stream()
                    .allMatch(t -> t.startsWith("posix/") || t.startsWith("sysv/")), "not first protocols over shm");
            assertEquals(Long.parseLong(nbr.group(1)), UcxRuns.rendezvousFrom(info), info);
        }
    }

    @Test
    void noRendezvousInTheRowOrNoRowIsUnknown() {
        assertEquals(-1, UcxRuns.rendezvousFrom("#   tag_send: 0..<egr/short>..93..<egr/bcopy>..(inf)\n"
                + "#   am_send: 0..<egr/short>..93..<egr/bcopy>..8192..<rndv>..(inf)\n"));
        assertEquals(-1, UcxRuns.rendezvousFrom("# tag_send from host memory:\n#   0..92  eager short\n"));
        assertEquals(-1, UcxRuns.rendezvousFrom(""));
    }
}
