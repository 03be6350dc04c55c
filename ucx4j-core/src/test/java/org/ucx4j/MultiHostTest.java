package org.ucx4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Two processes on two emulated hosts ({@link Hosts}: namespaces joined by a bridge): UCX sees two machines, so
 * messages go over TCP between real interfaces, and a host can vanish without a trace. Skipped where the hosts
 * cannot be set up (not root, no iproute2).
 */
@Timeout(180)
class MultiHostTest {
    private static Hosts hosts;

    @BeforeAll
    static void setUp() throws Exception {
        String why = Hosts.unavailable();
        assumeTrue(why == null, why);
        hosts = Hosts.create();
    }

    @AfterAll
    static void tearDown() {
        if (hosts != null) {
            hosts.close();
        }
    }

    private static Peer on(String host, String... args) throws Exception {
        return Peer.startWith(hosts.on(host), Map.of(), List.of(), args);
    }

    @Test
    void messagesOfEverySizeCrossBetweenHostsOverTheNetwork() throws Exception {
        try (Peer server = on(hosts.b, "serve-echo")) {
            String port = server.await("PORT ");
            try (Peer client = on(hosts.a, "connect-echo-sizes", hosts.ipB, port)) {
                // a host of its own to ucx4j too (the handshake's host name): no same-host checks between them
                assertEquals(hosts.a, client.await("HOST "));
                String transports = client.await("TRANSPORTS ");
                assertTrue(transports.contains("tcp/va"), "between hosts over host A's interface: " + transports);
                for (String local : List.of("posix", "sysv", "cma", "self")) {
                    assertFalse(transports.contains(local), "no same-host transport between hosts: " + transports);
                }
                assertEquals("0 1 8 1024 65536 1048576 16777216", client.await("ECHOED "));
            }
        }
    }

    @Test
    void aHostThatVanishesFailsItsPeersPendingOperationsWithinTheLivenessTimeout() throws Exception {
        try (Peer server = on(hosts.b, "serve-echo")) {
            String port = server.await("PORT ");
            try (Peer client = on(hosts.a, "connect-hold-recv", hosts.ipB, port)) {
                client.await("READY");
                hosts.awaitAcknowledged(hosts.a, port); // the handshake's last byte (see Bootstrap.quickAck)
                hosts.unplugB(true); // no reset, no error: host B's packets just stop
                long cut = System.nanoTime();
                try {
                    String failed = client.await("FAILED ");
                    double seconds = (System.nanoTime() - cut) / 1e9;
                    System.out.printf("MultiHostTest: the pending receive failed %.1f s after host B vanished%n",
                            seconds);
                    // UCX alone, over TCP, noticed nothing within the receive's 60 s (about 15 minutes by Linux's
                    // retransmission defaults); the connection's liveness probes fail it after ~5 s
                    assertTrue(failed.startsWith(ConnectionResetException.class.getName()), failed);
                    assertTrue(failed.contains("control connection lost"), failed);
                    assertTrue(seconds < 30, "failed " + seconds + " s after host B vanished (liveness timeout 5 s)");
                    assertEquals("false", client.await("ALIVE "));
                } finally {
                    hosts.unplugB(false);
                }
            }
        }
    }
}
