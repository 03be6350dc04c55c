package org.ucx4j.cli;

import java.io.PrintStream;
import java.time.ZonedDateTime;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * Sweep results: medians per stack/mode/size, printed as tables with ratios, or as JSON. A ratio between two stacks
 * is the median of the per-round ratios: each round runs the stacks back to back at one mode and size, so a round
 * pairs figures taken seconds apart, and a machine whose speed drifts over minutes (a shared VM) moves both. The
 * ratio of the two medians is in the JSON too; with one round they are the same.
 */
final class Report {
    final Map<String, Measurement> byKey = new LinkedHashMap<>();
    /** Each stack/mode/size's measurements in round order. */
    private final Map<String, List<Measurement>> rounds;
    final long[] sizes;
    final List<String> modes;
    final List<String> stacks;
    /** The ucx4j API measured (and ucx_perftest's matching test). */
    final UcxRuns.Api api;

    Report(Map<String, List<Measurement>> rounds, long[] sizes, List<String> modes, List<String> stacks,
            UcxRuns.Api api) {
        this.rounds = rounds;
        this.api = api;
        for (List<Measurement> r : rounds.values()) {
            Measurement m = Measurement.median(r);
            byKey.put(key(m.stack(), m.mode(), m.size()), m);
        }
        this.sizes = sizes;
        this.modes = modes;
        this.stacks = stacks;
    }

    static String key(String stack, String mode, long size) {
        return stack + "|" + mode + "|" + size;
    }

    Measurement get(String stack, String mode, long size) {
        return byKey.get(key(stack, mode, size));
    }

    /** This stack's median headline figure divided by {@code other}'s, same mode and size (NaN if missing). */
    double ratioOfMedians(Measurement m, String other) {
        Measurement o = get(other, m.mode(), m.size());
        return o == null ? Double.NaN : comparable(m) / comparable(o);
    }

    /**
     * A headline figure as it compares across stacks: a get's latency is a whole round trip (as {@code ucp_get}'s
     * is), so NIO's one-way latency counts twice against it.
     */
    private double comparable(Measurement m) {
        boolean oneWayAgainstRoundTrips = api == UcxRuns.Api.RMA && Measurement.LATENCY.equals(m.mode())
                && m.stack().equals("nio");
        return oneWayAgainstRoundTrips ? 2 * m.headline() : m.headline();
    }

    /** Per round, this stack's headline figure divided by {@code other}'s in the same round (NaN where missing). */
    double[] roundRatios(Measurement m, String other) {
        List<Measurement> mine = rounds.getOrDefault(key(m.stack(), m.mode(), m.size()), List.of());
        List<Measurement> theirs = rounds.getOrDefault(key(other, m.mode(), m.size()), List.of());
        double[] r = new double[Math.min(mine.size(), theirs.size())];
        for (int i = 0; i < r.length; i++) {
            r[i] = comparable(mine.get(i)) / comparable(theirs.get(i));
        }
        return r;
    }

    /** The median of {@link #roundRatios} (NaN if there is none): the ratio the table shows. */
    double ratio(Measurement m, String other) {
        double[] v = java.util.Arrays.stream(roundRatios(m, other)).filter(d -> !Double.isNaN(d)
                && !Double.isInfinite(d)).sorted().toArray();
        if (v.length == 0) {
            return Double.NaN;
        }
        return v.length % 2 == 1 ? v[v.length / 2] : (v[v.length / 2 - 1] + v[v.length / 2]) / 2;
    }

    static String machine() {
        return Runtime.getRuntime().availableProcessors() + " cpus, "
                + Runtime.getRuntime().maxMemory() / (1 << 20) + " MiB max heap, "
                + System.getProperty("os.name") + " " + System.getProperty("os.version") + ", Java "
                + System.getProperty("java.version") + ", UCX " + org.ucx4j.Ucx.version() + cpuIdle();
    }

    /**
     * Linux's CPU idle driver, and the guest halt-polling window where the driver is {@code haltpoll} (a KVM guest):
     * a blocking receive (NIO's) that finds nothing parks its CPU, and on a VM whose window is 0 every wake-up then
     * costs a hypervisor exit (~35 us on the VM of docs/performance.md), where a polling stack never parks. Empty
     * where the files are missing.
     */
    static String cpuIdle() {
        String driver = firstLine(java.nio.file.Path.of("/sys/devices/system/cpu/cpuidle/current_driver"));
        if (driver == null) {
            return "";
        }
        String poll = firstLine(java.nio.file.Path.of("/sys/module/haltpoll/parameters/guest_halt_poll_ns"));
        return ", cpuidle " + driver + (driver.equals("haltpoll") && poll != null
                ? " (guest halt polling up to " + poll + " ns)" : "");
    }

    private static String firstLine(java.nio.file.Path p) {
        try {
            List<String> lines = java.nio.file.Files.readAllLines(p);
            return lines.isEmpty() ? null : lines.get(0).trim();
        } catch (java.io.IOException | SecurityException e) {
            return null;
        }
    }

    void printTable(PrintStream out, String settings) {
        out.println("ucx4j bench sweep — " + ZonedDateTime.now().withNano(0) + " — " + machine());
        out.println(settings);
        for (String mode : modes) {
            String unit = switch (mode) {
                case Measurement.LATENCY -> api == UcxRuns.Api.RMA
                        ? "p50 us (lower is better): a get's round trip; NIO one way, ratios against its round trip"
                        : "one-way p50 us (lower is better)";
                case Measurement.BANDWIDTH -> "MB/s, 10^6 B (higher is better)";
                default -> "messages/s (higher is better)";
            };
            out.println();
            out.println(mode + ": " + unit);
            StringBuilder h = new StringBuilder(String.format(Locale.ROOT, "%10s", "size"));
            for (String s : stacks) {
                h.append(String.format(Locale.ROOT, " %12s", s));
            }
            if (stacks.contains("ucx4j") && stacks.contains("perftest")) {
                h.append(String.format(Locale.ROOT, " %15s", "ucx4j/perftest"));
            }
            if (stacks.contains("ucx4j") && stacks.contains("nio")) {
                h.append(String.format(Locale.ROOT, " %12s", "ucx4j/nio"));
            }
            if (stacks.contains("perftest") && stacks.contains("nio")) {
                h.append(String.format(Locale.ROOT, " %14s", "perftest/nio"));
            }
            out.println(h);
            for (long size : sizes) {
                Measurement u = get("ucx4j", mode, size);
                boolean any = false;
                StringBuilder row = new StringBuilder(String.format(Locale.ROOT, "%10s", Measurement.human(size)));
                for (String s : stacks) {
                    Measurement m = get(s, mode, size);
                    any |= m != null;
                    row.append(String.format(Locale.ROOT, " %12s", m == null ? "-" : fmt(m.headline())));
                }
                if (!any) {
                    continue;
                }
                if (stacks.contains("ucx4j") && stacks.contains("perftest")) {
                    row.append(String.format(Locale.ROOT, " %15s", u == null ? "-" : ratio(ratio(u, "perftest"))));
                }
                if (stacks.contains("ucx4j") && stacks.contains("nio")) {
                    row.append(String.format(Locale.ROOT, " %12s", u == null ? "-" : ratio(ratio(u, "nio"))));
                }
                if (stacks.contains("perftest") && stacks.contains("nio")) {
                    Measurement p = get("perftest", mode, size);
                    row.append(String.format(Locale.ROOT, " %14s", p == null ? "-" : ratio(ratio(p, "nio"))));
                }
                out.println(row);
            }
        }
    }

    Map<String, Object> json(String settings) {
        Map<String, Object> root = new LinkedHashMap<>();
        root.put("date", ZonedDateTime.now().withNano(0).toString());
        root.put("machine", machine());
        root.put("settings", settings);
        root.put("ratio_note", "ratio_to_X = median over rounds of this stack's headline figure / X's in the same "
                + "round (latency: p50 one-way us; bandwidth: MB/s; rate: msg/s); ratio_of_medians_to_X = this "
                + "stack's median / X's median; round_ratios_to_X = each round's ratio; rounds = this stack's headline "
                + "figure in each round, in the order run");
        List<Map<String, Object>> rows = new ArrayList<>();
        for (Measurement m : byKey.values()) {
            Map<String, Object> r = new LinkedHashMap<>();
            r.put("stack", m.stack());
            r.put("api", m.stack().equals("ucx4j") ? api.cli()
                    : m.stack().equals("perftest") ? PerftestRuns.test(api, m.mode()) : "socket");
            r.put("mode", m.mode());
            r.put("size", m.size());
            r.put("iters", m.iters());
            r.put("p50_us", num(m.p50Us()));
            r.put("p99_us", num(m.p99Us()));
            r.put("mean_us", num(m.meanUs()));
            r.put("mbps", num(m.mbps()));
            r.put("msgs_per_s", num(m.msgsPerS()));
            r.put("rounds", rounds.getOrDefault(key(m.stack(), m.mode(), m.size()), List.of()).stream()
                    .map(x -> num(x.headline())).toList());
            for (String other : List.of("perftest", "nio")) {
                r.put("ratio_to_" + other, num(ratio(m, other)));
                r.put("ratio_of_medians_to_" + other, num(ratioOfMedians(m, other)));
                r.put("round_ratios_to_" + other, java.util.Arrays.stream(roundRatios(m, other))
                        .mapToObj(Report::num).toList());
            }
            rows.add(r);
        }
        root.put("results", rows);
        return root;
    }

    private static Double num(double d) {
        return Double.isNaN(d) || Double.isInfinite(d) ? null : d;
    }

    private static String fmt(double v) {
        if (Double.isNaN(v)) {
            return "-";
        }
        if (v >= 100_000) {
            return String.format(Locale.ROOT, "%.3g", v);
        }
        return v >= 100 ? String.format(Locale.ROOT, "%.0f", v) : String.format(Locale.ROOT, "%.3f", v);
    }

    private static String ratio(double r) {
        return Double.isNaN(r) ? "-" : String.format(Locale.ROOT, "%.2fx", r);
    }
}
