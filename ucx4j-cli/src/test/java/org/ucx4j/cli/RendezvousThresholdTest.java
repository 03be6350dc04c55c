package org.ucx4j.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;

import org.junit.jupiter.api.Test;

/**
 * The benchmark server posts tag receives ahead only from UCX's rendezvous threshold on, read from
 * {@code ucp_ep_print_info}: the {@code tag_send:} row, not the {@code tag_send_nbr:} or {@code tag_send_sync:}
 * ones, unless ucx4j's own last line says its sends take the {@code tag_send_nbr:} thresholds, and the old fixed
 * threshold where the text has no such row; on UCX 1.16 and later, the first rendezvous row of the table for the same
 * selection.
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

    // as UCX 1.20.1 prints a shared-memory endpoint with 32 KiB segments (three of its tables)
    private static final String UCX_1_20 = """
            #
            # UCP endpoint
            #
            #               peer: <no debug data>
            #                 lane[0]:  4:posix/memory.0 md[3]          -> md[3]/posix/sysdev[255] seg 32832 am keepalive
            #
            # +--------------------------+-----------------------------------------------------------+
            # | ucx4j-1 intra-node cfg#0 | tagged message by ucp_tag_send* from host memory          |
            # +--------------------------+--------------------------------------------+--------------+
            # |                    0..92 | eager short                                | posix/memory |
            # |                93..32824 | eager copy-in copy-out                     | posix/memory |
            # |            32825..553108 | multi-frag eager copy-in copy-out          | posix/memory |
            # |              553109..inf | (?) rendezvous fragmented copy-in copy-out | posix/memory |
            # +--------------------------+--------------------------------------------+--------------+
            #\s
            # +--------------------------+-----------------------------------------------------------------------+
            # | ucx4j-1 intra-node cfg#0 | tagged message by ucp_tag_send*(fast-completion) from host memory     |
            # +--------------------------+--------------------------------------------------------+--------------+
            # |                    0..92 | eager short                                            | posix/memory |
            # |                93..32824 | eager copy-in copy-out                                 | posix/memory |
            # |            32825..532479 | multi-frag eager copy-in copy-out                      | posix/memory |
            # |                520K..inf | (?) rendezvous fragmented copy-in copy-out             | posix/memory |
            # +--------------------------+--------------------------------------------------------+--------------+
            #\s
            # +--------------------------+------------------------------------------------------------+
            # | ucx4j-1 intra-node cfg#0 | tagged message by ucp_tag_send*(multi) from host memory    |
            # +--------------------------+---------------------------------------------+--------------+
            # |                    0..92 | eager short                                 | posix/memory |
            # |                93..32824 | eager copy-in copy-out                      | posix/memory |
            # |            32825..242176 | multi-frag eager copy-in copy-out           | posix/memory |
            # |              242177..inf | (?) rendezvous fragmented copy-in copy-out  | posix/memory |
            # +--------------------------+---------------------------------------------+--------------+
            """;

    @Test
    void readsTheTablesOfUcx116AndLater() {
        assertEquals(553109, UcxRuns.rendezvousFrom(UCX_1_20));
        assertEquals(520 * 1024, UcxRuns.rendezvousFrom(UCX_1_20 + "# ucx4j eager sends: tag_send takes the "
                + "tag_send_nbr thresholds (UCP_OP_ATTR_FLAG_FAST_CMPL); am_send is eager up to 524288 B\n"));
        // only the multi-send table, or a table without a rendezvous row: unknown
        assertEquals(-1, UcxRuns.rendezvousFrom(UCX_1_20.substring(UCX_1_20.lastIndexOf("# \n"))));
        assertEquals(-1, UcxRuns.rendezvousFrom(UCX_1_20.replace("rendezvous", "eager")));
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

    /**
     * On every UCX version (1.13's rows, 1.16+'s tables) the threshold of a live shared-memory endpoint is found:
     * the benchmark never falls back to its fixed guess there.
     */
    @Test
    void aLiveSharedMemoryEndpointHasAThresholdOnEveryUcx() throws Exception {
        try (org.ucx4j.Ucx a = org.ucx4j.Ucx.open(); org.ucx4j.Ucx b = org.ucx4j.Ucx.open();
                org.ucx4j.Listener l = b.listen(0, ep -> {});
                org.ucx4j.Endpoint ep = a.connect("127.0.0.1", l.port())) {
            org.junit.jupiter.api.Assumptions.assumeTrue(ep.transports().stream()
                    .allMatch(t -> t.startsWith("posix/") || t.startsWith("sysv/")), "not over shared memory");
            String info = ep.info();
            long t = UcxRuns.rendezvousFrom(info);
            org.junit.jupiter.api.Assertions.assertTrue(t > 0, info);
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
