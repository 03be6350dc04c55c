package org.ucx4j.internal.engine;

import static org.junit.jupiter.api.Assertions.assertEquals;

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
}
