package org.ucx4j;

import static org.junit.jupiter.api.Assertions.*;

import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.ucx4j.internal.ffi.Structs;

/** Compiles a C program against the installed UCX headers and compares every offset, size and constant we use. */
class StructLayoutTest {
    /**
     * Structs whose whole size must match: UCX writes a whole {@code ucp_tag_recv_info_t} into ucx4j's, and reads
     * ucx4j's {@code ucp_dt_iov_t} arrays with its own stride.
     */
    private static final java.util.Set<String> EXACT = java.util.Set.of("ucp_tag_recv_info_t", "ucp_dt_iov_t");

    @Test
    void layoutsAndConstantsMatchInstalledHeaders(@TempDir Path dir) throws Exception {
        Path exe = NativeBuild.build(dir, "layout_check");
        Process run = new ProcessBuilder(exe.toString()).start();
        String out = new String(run.getInputStream().readAllBytes());
        assertEquals(0, run.waitFor());
        Map<String, long[]> c = new HashMap<>();
        for (String line : out.split("\n")) {
            int b = line.lastIndexOf(' '), a = line.lastIndexOf(' ', b - 1);
            c.put(line.substring(0, a), new long[] {Long.parseLong(line.substring(a + 1, b)),
                    Long.parseLong(line.substring(b + 1))});
        }
        int checked = 0;
        for (Map.Entry<String, long[]> e : Structs.layouts().entrySet()) {
            long[] expect = c.get(e.getKey());
            assertNotNull(expect, "C check does not print " + e.getKey());
            boolean wholeStruct = !e.getKey().contains(".");
            if (wholeStruct && EXACT.contains(e.getKey())) {
                assertEquals(expect[1], e.getValue()[1], e.getKey() + " size (UCX writes it whole or reads an array)");
            } else if (wholeStruct) {
                // UCX appends fields to params structs; ours may be shorter, never longer
                assertTrue(e.getValue()[1] <= expect[1], e.getKey() + " size: Java " + e.getValue()[1] + " > C " + expect[1]);
            } else {
                assertArrayEquals(expect, e.getValue(), e.getKey() + " {offset, size}");
            }
            checked++;
        }
        for (Map.Entry<String, Long> e : Structs.constants().entrySet()) {
            long[] expect = c.get(e.getKey());
            if (e.getKey().equals("UCS_MEMORY_INFO_ROOM")) {
                // the memory-type cache's header is a devel header: checked where it is installed
                assertTrue(expect == null || expect[0] <= e.getValue(),
                        () -> "ucs_memory_info_t is " + expect[0] + " B");
                continue;
            }
            assertNotNull(expect, "C check does not print " + e.getKey());
            if (e.getKey().equals("UCP_API_MINOR")) {
                // the API version ucx4j asks ucp_init for: the oldest it supports, never newer than the headers
                assertTrue(e.getValue() <= expect[0], "UCP_API_MINOR: ucx4j asks for " + e.getValue()
                        + ", the headers are 1." + expect[0]);
            } else {
                assertEquals(expect[0], e.getValue().longValue(), e.getKey());
            }
            checked++;
        }
        assertTrue(checked > 100, "checked " + checked);
    }
}
