package org.ucx4j.internal.engine;

import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Transports read off UCX's own descriptions, whose lines have kept one form from UCX 1.13 to 1.20:
 * {@code ucp_context_print_info} lists each resource as {@code resource 4 : md 3 dev 0 flags -- posix/memory}, and
 * {@code ucp_ep_print_info} each lane as {@code lane[0]:  4:posix/memory.0 md[3] ...}.
 */
public final class TransportInfo {
    /** The flags are two characters: {@code --}, or {@code a-} for an auxiliary transport (ud_verbs beside rc). */
    private static final Pattern RESOURCE = Pattern.compile(
            "(?m)^#\\s*resource\\s+\\d+\\s*:.*flags\\s+\\S\\S\\s+(\\S+/\\S+)\\s*$");
    private static final Pattern LANE = Pattern.compile("(?m)^#\\s*lane\\[\\d+\\]:\\s+\\d+:(\\S+?/\\S+?)(?:\\.\\d+)?\\s");

    private TransportInfo() {}

    /** {@code transport/device} of every resource in a context description, in UCX's order. */
    public static List<String> resources(String contextInfo) {
        return matches(RESOURCE.matcher(contextInfo));
    }

    /** {@code transport/device} of an endpoint's lanes, each once, in lane order. */
    public static List<String> lanes(String endpointInfo) {
        return matches(LANE.matcher(endpointInfo));
    }

    /** Whether {@code transport/device} is one of UCX's shared-memory FIFO transports (uct_mm). */
    public static boolean isSharedMemory(String transport) {
        return transport.startsWith("posix/") || transport.startsWith("sysv/") || transport.startsWith("xpmem/");
    }

    /**
     * Whether {@code transport/device} is a shared-memory FIFO and nothing else: {@code posix}, {@code sysv} (whose
     * rendezvous copies through the FIFO); {@code xpmem} also maps the peer's memory, for zero-copy rendezvous.
     */
    public static boolean isFifo(String transport) {
        return transport.startsWith("posix/") || transport.startsWith("sysv/");
    }

    /**
     * Whether an endpoint description is of UCX's first protocols, which print one row of thresholds per operation
     * ({@code tag_send: 0..<egr/short>..93..<egr/bcopy>..32832..<rndv>..(inf)}); the protocols of UCX 1.16 and later
     * print a table per operation instead.
     */
    public static boolean firstProtocols(String endpointInfo) {
        return FIRST_PROTOCOLS.matcher(endpointInfo).find();
    }

    private static final Pattern FIRST_PROTOCOLS = Pattern.compile("(?m)^#\\s*tag_send:\\s");

    private static List<String> matches(Matcher m) {
        Set<String> found = new LinkedHashSet<>();
        while (m.find()) {
            found.add(m.group(1));
        }
        return List.copyOf(new ArrayList<>(found));
    }
}
