package org.ucx4j.cli;

import java.io.PrintStream;
import java.time.ZonedDateTime;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/** Sweep results: medians per stack/mode/size, printed as tables with ratios, or as JSON. */
final class Report {
    final Map<String, Measurement> byKey = new LinkedHashMap<>();
    final long[] sizes;
    final List<String> modes;
    final List<String> stacks;

    Report(List<Measurement> medians, long[] sizes, List<String> modes, List<String> stacks) {
        for (Measurement m : medians) {
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

    /** This stack's headline figure divided by {@code other}'s for the same mode and size (NaN if missing). */
    double ratio(Measurement m, String other) {
        Measurement o = get(other, m.mode(), m.size());
        return o == null ? Double.NaN : m.headline() / o.headline();
    }

    static String machine() {
        return Runtime.getRuntime().availableProcessors() + " cpus, "
                + Runtime.getRuntime().maxMemory() / (1 << 20) + " MiB max heap, "
                + System.getProperty("os.name") + " " + System.getProperty("os.version") + ", Java "
                + System.getProperty("java.version") + ", UCX " + org.ucx4j.Ucx.version();
    }

    void printTable(PrintStream out, String settings) {
        out.println("ucx4j bench sweep — " + ZonedDateTime.now().withNano(0) + " — " + machine());
        out.println(settings);
        for (String mode : modes) {
            String unit = switch (mode) {
                case Measurement.LATENCY -> "one-way p50 us (lower is better)";
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
                out.println(row);
            }
        }
    }

    Map<String, Object> json(String settings) {
        Map<String, Object> root = new LinkedHashMap<>();
        root.put("date", ZonedDateTime.now().withNano(0).toString());
        root.put("machine", machine());
        root.put("settings", settings);
        root.put("ratio_note", "ratio_to_X = this stack's headline figure / X's (latency: p50 one-way us; "
                + "bandwidth: MB/s; rate: msg/s)");
        List<Map<String, Object>> rows = new ArrayList<>();
        for (Measurement m : byKey.values()) {
            Map<String, Object> r = new LinkedHashMap<>();
            r.put("stack", m.stack());
            r.put("api", m.stack().equals("ucx4j") ? "tag" : m.stack().equals("perftest") ? "tag" : "socket");
            r.put("mode", m.mode());
            r.put("size", m.size());
            r.put("iters", m.iters());
            r.put("p50_us", num(m.p50Us()));
            r.put("p99_us", num(m.p99Us()));
            r.put("mean_us", num(m.meanUs()));
            r.put("mbps", num(m.mbps()));
            r.put("msgs_per_s", num(m.msgsPerS()));
            r.put("ratio_to_perftest", num(ratio(m, "perftest")));
            r.put("ratio_to_nio", num(ratio(m, "nio")));
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
