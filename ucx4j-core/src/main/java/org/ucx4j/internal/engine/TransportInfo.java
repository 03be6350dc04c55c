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

    private static List<String> matches(Matcher m) {
        Set<String> found = new LinkedHashSet<>();
        while (m.find()) {
            found.add(m.group(1));
        }
        return List.copyOf(new ArrayList<>(found));
    }
}
