package org.ucx4j.cli;

import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.knowm.xchart.BitmapEncoder;
import org.knowm.xchart.VectorGraphicsEncoder;
import org.knowm.xchart.XYChart;
import org.knowm.xchart.XYChartBuilder;
import org.knowm.xchart.style.markers.SeriesMarkers;

/** Latency and bandwidth against message size, log-log, one series per stack (XChart). */
final class Plot {
    private Plot() {}

    /** Writes FILE.png (both charts side by side) or FILE-latency.svg and FILE-bandwidth.svg; returns the files. */
    static List<Path> draw(Report r, Path file) throws IOException {
        List<XYChart> charts = new ArrayList<>();
        if (r.modes.contains(Measurement.LATENCY)) {
            charts.add(chart(r, Measurement.LATENCY, r.api == UcxRuns.Api.RMA
                    ? "Get latency (p50, round trip; NIO one way)" : "One-way latency (p50)", "latency (us)"));
        }
        if (r.modes.contains(Measurement.BANDWIDTH)) {
            charts.add(chart(r, Measurement.BANDWIDTH, "Bandwidth", "MB/s (10^6 B/s)"));
        }
        if (charts.isEmpty()) {
            System.err.println("ucx4j: --plot draws latency and bandwidth; neither was measured");
            return List.of();
        }
        String ext = extension(file);
        String name = file.getFileName().toString();
        int dot = name.lastIndexOf('.');
        String base = dot < 0 ? file.toString() : file.toString().substring(0, file.toString().length() - name.length()
                + dot);
        List<Path> written = new ArrayList<>();
        if (ext.equals("svg") && charts.size() == 1) { // one chart per SVG file: FILE.svg when there is one
            VectorGraphicsEncoder.saveVectorGraphic(charts.getFirst(), base,
                    VectorGraphicsEncoder.VectorGraphicsFormat.SVG);
            written.add(Path.of(base + ".svg"));
        } else if (ext.equals("svg")) {
            for (XYChart c : charts) {
                String out = base + "-" + (c.getTitle().contains("latency") ? "latency" : "bandwidth");
                VectorGraphicsEncoder.saveVectorGraphic(c, out, VectorGraphicsEncoder.VectorGraphicsFormat.SVG);
                written.add(Path.of(out + ".svg"));
            }
        } else if (ext.equals("png")) {
            BitmapEncoder.saveBitmap(new ArrayList<>(charts), 1, charts.size(), base, BitmapEncoder.BitmapFormat.PNG);
            written.add(Path.of(base + ".png"));
        }
        return written;
    }

    /** {@code png} or {@code svg}, from {@code file}'s name (none: png); refuses anything else before a run. */
    static String extension(Path file) {
        String name = file.getFileName().toString();
        int dot = name.lastIndexOf('.');
        String ext = dot < 0 ? "png" : name.substring(dot + 1).toLowerCase(java.util.Locale.ROOT);
        if (!ext.equals("png") && !ext.equals("svg")) {
            throw new UsageException("--plot needs a .png or .svg file name, got " + file);
        }
        return ext;
    }

    private static XYChart chart(Report r, String mode, String title, String yTitle) {
        XYChart c = new XYChartBuilder().width(640).height(440).title(title).xAxisTitle("message size (bytes)")
                .yAxisTitle(yTitle).build();
        c.getStyler().setXAxisLogarithmic(true);
        c.getStyler().setYAxisLogarithmic(true);
        c.getStyler().setLegendPosition(org.knowm.xchart.style.Styler.LegendPosition.InsideNW);
        for (String stack : r.stacks) {
            List<Double> x = new ArrayList<>(), y = new ArrayList<>();
            for (long size : r.sizes) {
                Measurement m = r.get(stack, mode, size);
                if (m != null && m.headline() > 0) {
                    x.add((double) size);
                    y.add(m.headline());
                }
            }
            if (!x.isEmpty()) {
                c.addSeries(stack, x, y).setMarker(SeriesMarkers.CIRCLE);
            }
        }
        return c;
    }
}
