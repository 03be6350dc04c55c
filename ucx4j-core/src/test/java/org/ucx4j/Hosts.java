package org.ucx4j;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * Two emulated hosts on this machine for tests: each a network, UTS and IPC namespace of its own (its own
 * interface, MAC address, hostname and System V IPC), so UCX sees another machine and connects over TCP only; the
 * two are joined by a bridge in a third namespace, whose port to host B can be unplugged: B then vanishes from A's
 * view without a reset or an error, as a crashed or cut-off machine does. Needs Linux, root, {@code ip} and
 * {@code unshare} ({@link #unavailable()} says what is missing).
 */
final class Hosts implements AutoCloseable {
    final String a, b, bridge;
    final String ipA, ipB;
    private final List<String> created = new ArrayList<>();

    private Hosts(String prefix, int subnet) {
        a = prefix + "a";
        b = prefix + "b";
        bridge = prefix + "r";
        ipA = "10.211." + subnet + ".1";
        ipB = "10.211." + subnet + ".2";
    }

    /** Why the hosts cannot be set up here, or null. */
    static String unavailable() {
        if (!System.getProperty("os.name").equals("Linux")) {
            return "emulated hosts need Linux network namespaces";
        }
        try {
            if (!run("id", "-u").trim().equals("0")) {
                return "emulated hosts need root (ip netns, unshare)";
            }
            String probe = "u4jprobe" + ProcessHandle.current().pid();
            run("ip", "netns", "add", probe); // needs CAP_SYS_ADMIN (a container without it refuses)
            try {
                run("ip", "netns", "exec", probe, "unshare", "--uts", "--ipc", "--", "true");
            } finally {
                run("ip", "netns", "del", probe);
            }
        } catch (IOException e) {
            return "emulated hosts need iproute2, util-linux and the right to create namespaces: "
                    + e.getMessage();
        }
        return null;
    }

    static Hosts create() throws IOException {
        removeStale();
        long pid = ProcessHandle.current().pid();
        Hosts h = new Hosts("u4j" + pid, (int) (pid % 250) + 1);
        try {
            h.setUp();
        } catch (IOException | RuntimeException e) {
            h.close();
            throw e;
        }
        return h;
    }

    /** Namespaces left by a test JVM (this one's pid included: reused) that was killed before it removed them. */
    private static void removeStale() throws IOException {
        long self = ProcessHandle.current().pid();
        for (String line : run("ip", "netns", "list").lines().toList()) {
            String ns = line.split("\\s+")[0];
            if (ns.matches("u4j\\d+[abr]")) {
                long owner = Long.parseLong(ns.substring(3, ns.length() - 1));
                if (owner == self || ProcessHandle.of(owner).isEmpty()) {
                    run("ip", "netns", "del", ns);
                    deleteHostsFile(ns);
                }
            }
        }
    }

    /**
     * The namespace's own {@code /etc/hosts} ({@code ip netns exec} mounts {@code /etc/netns/NS/hosts} over it),
     * naming its address, so its hostname resolves there as a real host's does (ucx4j's handshake sends it).
     */
    private static void writeHostsFile(String ns, String ip) throws IOException {
        Path dir = Path.of("/etc/netns", ns);
        Files.createDirectories(dir);
        Files.writeString(dir.resolve("hosts"), "127.0.0.1 localhost\n" + ip + " " + ns + "\n");
    }

    private static void deleteHostsFile(String ns) throws IOException {
        Path dir = Path.of("/etc/netns", ns);
        Files.deleteIfExists(dir.resolve("hosts"));
        Files.deleteIfExists(dir);
    }

    private void setUp() throws IOException {
        for (String ns : List.of(a, b, bridge)) {
            run("ip", "netns", "add", ns);
            created.add(ns);
            run("ip", "-n", ns, "link", "set", "lo", "up");
        }
        run("ip", "-n", bridge, "link", "add", "br0", "type", "bridge");
        run("ip", "-n", bridge, "link", "set", "br0", "up");
        plug(a, "va", ipA);
        plug(b, "vb", ipB);
        writeHostsFile(a, ipA);
        writeHostsFile(b, ipB);
    }

    private void plug(String ns, String dev, String ip) throws IOException {
        run("ip", "link", "add", dev, "netns", ns, "type", "veth", "peer", "name", dev + "r", "netns", bridge);
        run("ip", "-n", bridge, "link", "set", dev + "r", "master", "br0");
        run("ip", "-n", bridge, "link", "set", dev + "r", "up");
        run("ip", "-n", ns, "addr", "add", ip + "/24", "dev", dev);
        run("ip", "-n", ns, "link", "set", dev, "up");
    }

    /** The command prefix that runs a program on host {@code ns} (its hostname: the namespace's name). */
    List<String> on(String ns) {
        return List.of("ip", "netns", "exec", ns, "unshare", "--uts", "--ipc", "--", "sh", "-c",
                "hostname \"$0\" && exec \"$@\"", ns);
    }

    /**
     * Waits (up to 5 s) until host {@code ns}'s TCP connections to {@code port} have nothing unacknowledged: an
     * idle connection, the state whose loss the liveness probes detect.
     */
    void awaitAcknowledged(String ns, String port) throws IOException, InterruptedException {
        long until = System.nanoTime() + 5_000_000_000L;
        String out;
        do {
            out = run("ip", "netns", "exec", ns, "ss", "-tnH", "( dport = :" + port + " )");
            if (!out.isBlank() && out.lines().allMatch(l -> l.trim().split("\\s+")[2].equals("0"))) {
                return;
            }
            Thread.sleep(10);
        } while (System.nanoTime() < until);
        throw new IllegalStateException("connections to port " + port + " on " + ns + " never idle: " + out);
    }

    /** Host B's cable out (true) or back in: its bridge port goes down, and A's packets to it go nowhere. */
    void unplugB(boolean out) throws IOException {
        run("ip", "-n", bridge, "link", "set", "vbr", out ? "down" : "up");
    }

    @Override
    public void close() {
        for (String ns : created) {
            try {
                run("ip", "netns", "del", ns); // takes its interfaces along
                deleteHostsFile(ns);
            } catch (IOException e) {
                System.err.println("could not delete network namespace " + ns + ": " + e.getMessage());
            }
        }
        created.clear();
    }

    private static String run(String... cmd) throws IOException {
        Path log = Files.createTempFile("u4j-hosts", ".out");
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(log.toFile()).start();
        try {
            boolean ended = p.waitFor(30, TimeUnit.SECONDS);
            String out = Files.readString(log, StandardCharsets.UTF_8);
            if (!ended || p.exitValue() != 0) {
                throw new IOException(String.join(" ", cmd) + (ended ? " failed: " : " hung: ") + out.trim());
            }
            return out;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IOException("interrupted", e);
        } finally {
            p.destroyForcibly();
            Files.deleteIfExists(log);
        }
    }
}
