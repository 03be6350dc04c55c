package org.ucx4j.cli;

import java.util.Arrays;
import java.util.List;
import java.util.function.ToDoubleFunction;

/** One measured run (NaN where a stack does not report a figure). MB = 10^6 B. */
record Measurement(String stack, String mode, long size, long iters, double p50Us, double p99Us, double meanUs,
        double mbps, double msgsPerS) {

    static final String LATENCY = "latency", BANDWIDTH = "bandwidth", RATE = "rate";

    /** The figure a mode is judged by: one-way p50 for latency, MB/s for bandwidth, msg/s for rate. */
    double headline() {
        return switch (mode) {
            case LATENCY -> p50Us;
            case BANDWIDTH -> mbps;
            default -> msgsPerS;
        };
    }

    /** A run that failed: no figures, so medians and ratios leave it out, and later rounds stay paired. */
    static Measurement failed(String stack, String mode, long size) {
        return new Measurement(stack, mode, size, 0, Double.NaN, Double.NaN, Double.NaN, Double.NaN, Double.NaN);
    }

    /** Per-metric median over repeated runs. */
    static Measurement median(List<Measurement> runs) {
        Measurement f = runs.getFirst();
        long iters = runs.stream().mapToLong(Measurement::iters).max().orElse(0);
        return new Measurement(f.stack, f.mode, f.size, iters, med(runs, Measurement::p50Us),
                med(runs, Measurement::p99Us), med(runs, Measurement::meanUs), med(runs, Measurement::mbps),
                med(runs, Measurement::msgsPerS));
    }

    private static double med(List<Measurement> runs, ToDoubleFunction<Measurement> f) {
        double[] v = runs.stream().mapToDouble(f).filter(d -> !Double.isNaN(d)).sorted().toArray();
        if (v.length == 0) {
            return Double.NaN;
        }
        return v.length % 2 == 1 ? v[v.length / 2] : (v[v.length / 2 - 1] + v[v.length / 2]) / 2;
    }

    static String human(long size) {
        if (size >= 1 << 20 && size % (1 << 20) == 0) {
            return size / (1 << 20) + " MiB";
        }
        if (size >= 1024 && size % 1024 == 0) {
            return size / 1024 + " KiB";
        }
        return size + " B";
    }

    static long parseSize(String s) {
        String t = s.trim().toLowerCase();
        long mul = 1;
        if (t.endsWith("k")) {
            mul = 1024;
        } else if (t.endsWith("m")) {
            mul = 1 << 20;
        }
        if (mul != 1) {
            t = t.substring(0, t.length() - 1);
        }
        long v;
        try {
            v = Math.multiplyExact(Long.parseLong(t), mul);
        } catch (ArithmeticException | NumberFormatException e) {
            throw new UsageException("not a size (bytes, or with a k or m suffix): " + s);
        }
        if (v <= 0) {
            throw new UsageException("sizes must be positive: " + s);
        }
        return v;
    }

    static long[] parseSizes(String list) {
        return Arrays.stream(list.split(",")).mapToLong(Measurement::parseSize).toArray();
    }
}
