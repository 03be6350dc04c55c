package org.ucx4j.cli;

import java.time.Duration;
import java.time.LocalDate;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import org.apache.spark.SparkConf;
import org.apache.spark.executor.TaskMetrics;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerTaskEnd;
import org.apache.spark.shuffle.ucx4j.ExecutorProbe;
import org.apache.spark.shuffle.ucx4j.PeerTraffic;
import org.apache.spark.shuffle.ucx4j.UcxShuffleManager;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.ucx4j.EndpointStats;
import org.ucx4j.Ucx;

/** Runs inside the Spark JVM that {@link SparkJoinBench} starts: one local-cluster per backend. */
final class SparkJoinDriver {
    private final SparkJoinBench o;
    private final List<Map<String, Object>> json = new ArrayList<>();

    SparkJoinDriver(SparkJoinBench options) {
        this.o = options;
    }

    /** Task-time totals of one iteration, from Spark's task metrics (what the UI shows). */
    static final class Totals extends SparkListener {
        long runMs;
        long cpuNs;
        long fetchWaitMs;
        long writeNs;
        long gcMs;
        long serdeMs;
        long written;
        long remoteRead;
        long localRead;

        @Override
        public synchronized void onTaskEnd(SparkListenerTaskEnd end) {
            TaskMetrics m = end.taskMetrics();
            if (m == null) {
                return;
            }
            runMs += m.executorRunTime();
            cpuNs += m.executorCpuTime();
            fetchWaitMs += m.shuffleReadMetrics().fetchWaitTime();
            writeNs += m.shuffleWriteMetrics().writeTime();
            gcMs += m.jvmGCTime();
            serdeMs += m.executorDeserializeTime() + m.resultSerializationTime();
            written += m.shuffleWriteMetrics().bytesWritten();
            remoteRead += m.shuffleReadMetrics().remoteBytesRead();
            localRead += m.shuffleReadMetrics().localBytesRead();
        }

        synchronized Totals snapshotAndReset() {
            Totals t = new Totals();
            t.runMs = runMs;
            t.cpuNs = cpuNs;
            t.fetchWaitMs = fetchWaitMs;
            t.writeNs = writeNs;
            t.gcMs = gcMs;
            t.serdeMs = serdeMs;
            t.written = written;
            t.remoteRead = remoteRead;
            t.localRead = localRead;
            runMs = cpuNs = fetchWaitMs = writeNs = gcMs = serdeMs = written = remoteRead = localRead = 0;
            return t;
        }
    }

    record Iteration(double wallS, Totals totals) {
    }

    /** One round's order of backends and its ratios (built-in ÷ ucx4j). */
    record Round(List<String> order, double endToEnd, double fetchWait) {
    }

    int run() throws Exception {
        Map<String, List<Iteration>> results = new LinkedHashMap<>();
        List<Round> rounds = new ArrayList<>(); // each round that ran both backends
        for (int round = 0; round < o.rounds; round++) {
            List<String> order = new ArrayList<>(o.backends);
            if (round % 2 == 1) {
                java.util.Collections.reverse(order);
            }
            Map<String, List<Iteration>> thisRound = new LinkedHashMap<>();
            for (String backend : order) {
                List<Iteration> its = runBackend(backend, round);
                thisRound.put(backend, its);
                results.computeIfAbsent(backend, k -> new ArrayList<>()).addAll(its);
            }
            if (thisRound.containsKey("sort") && thisRound.containsKey("ucx4j")) {
                rounds.add(new Round(order, wall(thisRound.get("sort")) / wall(thisRound.get("ucx4j")),
                        fetchWait(thisRound.get("sort")) / fetchWait(thisRound.get("ucx4j"))));
            }
        }
        if (results.containsKey("sort") && results.containsKey("ucx4j")) {
            double wallSort = wall(results.get("sort"));
            double wallUcx = wall(results.get("ucx4j"));
            double waitSort = fetchWait(results.get("sort"));
            double waitUcx = fetchWait(results.get("ucx4j"));
            System.out.println("=====");
            System.out.printf(Locale.ROOT, "%-18s | end to end %.2fx (%.2f s vs %.2f s) | fetch wait %s (%.0f ms vs"
                    + " %.0f ms)%n", "built-in / ucx4j", wallSort / wallUcx, wallSort, wallUcx,
                    waitUcx == 0 ? "-" : String.format(Locale.ROOT, "%.2fx", waitSort / waitUcx), waitSort, waitUcx);
            for (int r = 0; r < rounds.size(); r++) {
                Round round = rounds.get(r);
                System.out.printf(Locale.ROOT, "%-18s | end to end %.2fx | fetch wait %s   (%s)%n",
                        "  round " + (r + 1), round.endToEnd(), Double.isFinite(round.fetchWait())
                                ? String.format(Locale.ROOT, "%.2fx", round.fetchWait()) : "-",
                        String.join(" then ", round.order()));
            }
            System.out.println("(medians of every timed iteration; above 1x means ucx4j is faster / waits less)");
        }
        o.writeJson(json);
        return 0;
    }

    private static double wall(List<Iteration> its) {
        return median(its.stream().mapToDouble(Iteration::wallS).toArray());
    }

    private static double fetchWait(List<Iteration> its) {
        return median(its.stream().mapToDouble(i -> i.totals().fetchWaitMs).toArray());
    }

    private List<Iteration> runBackend(String backend, int round) throws Exception {
        String master = "local-cluster[" + o.executors + ",1," + o.executorMemoryMb + "]";
        SparkConf conf = new SparkConf().setMaster(master).setAppName("ucx4j spark-join " + backend)
                .set("spark.executor.memory", o.executorMemoryMb + "m")
                .set("spark.shuffle.manager", backend.equals("ucx4j") ? UcxShuffleManager.class.getName() : "sort")
                .set("spark.shuffle.readHostLocalDisk", "false") // both backends really cross processes
                .set("spark.executor.extraJavaOptions", "--enable-native-access=ALL-UNNAMED")
                .set("spark.sql.autoBroadcastJoinThreshold", "-1") // a shuffle join, as in the seed
                .set("spark.sql.shuffle.partitions", String.valueOf(o.partitions))
                .set("spark.sql.adaptive.coalescePartitions.enabled", "false")
                .set("spark.ui.enabled", "false");
        o.conf.forEach(conf::set);
        SparkSession spark = SparkSession.builder().config(conf).getOrCreate();
        try {
            ExecutorProbe.awaitExecutors(spark.sparkContext(), o.executors, Duration.ofMinutes(2));
            Totals listener = new Totals();
            spark.sparkContext().addSparkListener(listener);
            long n = o.rowsPerPartition * o.partitions;
            // payload-bytes: random alphanumerics, which Spark's lz4 cannot shrink much (like real payloads)
            String[] pad = o.payloadBytes > 0 ? new String[] {"randstr(" + o.payloadBytes + ") as pad"}
                    : new String[0];
            Dataset<Row> left = spark.range(0, n, 1, o.partitions)
                    .selectExpr(columns("pmod(id * 2654435761, " + n + ") as key", pad));
            long matchPerMille = Math.round(o.fracMatch * 1000);
            Dataset<Row> right = spark.range(0, n, 1, o.partitions)
                    .selectExpr(columns("CASE WHEN pmod(hash(id), 1000) < " + matchPerMille + " THEN pmod(id * 40503, "
                            + n + ") ELSE " + n + " + id END as key", pad));
            Dataset<Row> joined = left.join(right, "key").sort("key");

            long matched = left.join(right, "key").count(); // a check both backends agree (shuffles keys only)
            spark.sparkContext().listenerBus().waitUntilEmpty();
            listener.snapshotAndReset(); // the check's tasks count in no iteration
            List<Iteration> warm = new ArrayList<>();
            for (int i = 0; i < o.warmup; i++) { // the timed query itself: its large blocks take other code paths
                long t0 = System.nanoTime();
                joined.write().format("noop").mode("overwrite").save();
                double wall = (System.nanoTime() - t0) / 1e9;
                spark.sparkContext().listenerBus().waitUntilEmpty();
                warm.add(new Iteration(wall, listener.snapshotAndReset()));
            }
            spark.sparkContext().listenerBus().waitUntilEmpty();
            listener.snapshotAndReset();

            double processed = 2.0 * n * (16 + o.payloadBytes);
            List<Iteration> its = new ArrayList<>();
            for (int i = 0; i < o.iterations; i++) {
                long t0 = System.nanoTime();
                joined.write().format("noop").mode("overwrite").save();
                double wall = (System.nanoTime() - t0) / 1e9;
                spark.sparkContext().listenerBus().waitUntilEmpty();
                Totals t = listener.snapshotAndReset();
                its.add(new Iteration(wall, t));
                json.add(SparkJoinBench.row("backend", backend, "round", round, "iteration", i, "wall_s", wall,
                        "throughput_mbps", processed / wall / 1e6, "rows_per_partition", o.rowsPerPartition,
                        "partitions", o.partitions, "frac_match", o.fracMatch, "matched_rows", matched,
                        "data_processed_bytes", (long) processed, "shuffle_bytes_written", t.written,
                        "remote_bytes_read", t.remoteRead, "fetch_wait_ms", t.fetchWaitMs,
                        "shuffle_write_ms", t.writeNs / 1_000_000, "task_run_ms", t.runMs,
                        "task_cpu_ms", t.cpuNs / 1_000_000, "gc_ms", t.gcMs, "task_serde_ms", t.serdeMs));
            }
            List<ExecutorCpu> cpu = ExecutorProbe.onEach(spark.sparkContext(), ExecutorCpu::local);
            for (ExecutorCpu c : cpu) {
                json.add(SparkJoinBench.row("backend", backend, "round", round, "executor", c.executor(),
                        "executor_cpu_s", c.totalS(), "task_threads_cpu_s", c.tasksS(),
                        "shuffle_network_threads_cpu_s", c.networkS(), "virtual_thread_carriers_cpu_s", c.carriersS(),
                        "other_java_threads_cpu_s", c.otherS()));
            }
            print(backend, round, master, processed, matched, warm, its,
                    backend.equals("ucx4j") ? UcxShuffleManager.clusterTraffic(spark.sparkContext()) : null, cpu);
            return its;
        } finally {
            spark.stop();
        }
    }

    private void print(String backend, int round, String master, double processed, long matched, List<Iteration> warm,
            List<Iteration> its, List<PeerTraffic> traffic, List<ExecutorCpu> cpu) {
        Totals first = its.get(0).totals();
        System.out.println();
        System.out.println("Spark join benchmark (" + LocalDate.now() + ", round " + (round + 1) + " of " + o.rounds
                + ")");
        System.out.println("-----");
        line("backend", backend.equals("ucx4j") ? "spark + ucx4j (" + UcxShuffleManager.class.getSimpleName() + ")"
                : "spark built-in (sort shuffle, Netty)");
        line("join", "inner on key, then sort");
        line("rows-per-partition", String.valueOf(o.rowsPerPartition));
        line("partitions", String.valueOf(o.partitions));
        line("frac-match", String.valueOf(o.fracMatch));
        line("cluster", master + ", readHostLocalDisk=false");
        line("protocol", backend.equals("ucx4j") ? "ucx (UCX " + Ucx.version() + ")" : "tcp (Netty)");
        line("data-processed", SparkJoinBench.bytes(processed));
        line("shuffled", SparkJoinBench.bytes(first.written) + " written, " + SparkJoinBench.bytes(first.remoteRead)
                + " fetched remotely per iteration");
        line("matched rows", String.valueOf(matched));
        for (Iteration w : warm) {
            line("warm-up (untimed)", String.format(Locale.ROOT, "%.2f s, fetch wait %.2f s", w.wallS(),
                    w.totals().fetchWaitMs / 1e3));
        }
        System.out.println("=====");
        line("Wall-clock", "Throughput");
        System.out.println("-----");
        for (Iteration it : its) {
            line(String.format(Locale.ROOT, "%.2f s", it.wallS()),
                    SparkJoinBench.bytes(processed / it.wallS()) + "/s");
        }
        System.out.println("=====");
        line("(w1,w2)", "25% 50% 75% (total nbytes)   [w1 fetched from w2, all runs]");
        System.out.println("-----");
        if (traffic == null) {
            System.out.println("(Spark's Netty client keeps no per-peer figures)");
        } else {
            Map<String, EndpointStats> pairs = new TreeMap<>();
            for (PeerTraffic t : traffic) {
                if (t.fetched()) {
                    String pair = "(" + pad2(t.executor()) + "," + pad2(t.peer()) + ")";
                    for (int n = 2; pairs.containsKey(pair); n++) { // a connection that was replaced: one row each
                        pair = "(" + pad2(t.executor()) + "," + pad2(t.peer()) + ")#" + n;
                    }
                    pairs.put(pair, t.stats());
                }
            }
            pairs.forEach((pair, s) -> line(pair, Double.isNaN(s.p50MBps())
                    ? "- - - (" + SparkJoinBench.bytes(s.bytesReceived()) + ")"
                    : String.format(Locale.ROOT, "%s/s %s/s %s/s (%s)", SparkJoinBench.bytes(s.p25MBps() * 1e6),
                            SparkJoinBench.bytes(s.p50MBps() * 1e6), SparkJoinBench.bytes(s.p75MBps() * 1e6),
                            SparkJoinBench.bytes(s.bytesReceived()))));
        }
        System.out.println("=====");
        line("task time", "fetch wait | shuffle write | GC | task (de)ser | run (cpu)   [sum over tasks]");
        System.out.println("-----");
        for (Iteration it : its) {
            Totals t = it.totals();
            line(String.format(Locale.ROOT, "%.2f s", it.wallS()), String.format(Locale.ROOT,
                    "%.2f s | %.2f s | %.2f s | %.2f s | %.2f s (%.2f s)", t.fetchWaitMs / 1e3, t.writeNs / 1e9,
                    t.gcMs / 1e3, t.serdeMs / 1e3, t.runMs / 1e3, t.cpuNs / 1e9));
        }
        line("", "fetch wait: reducers blocked on remote blocks; shuffle write: map tasks blocked on their output");
        line("", "files; GC: JVM-wide pauses seen by each task, mostly inside run; task (de)ser: tasks and results,");
        line("", "outside run; run: the tasks' run time, fetch wait and shuffle write included: compute = run - fetch");
        line("", "wait - shuffle write, the (de)serialization of shuffled rows inside it (Spark keeps no separate");
        line("", "figure; a DataFrame shuffles its rows as UnsafeRow bytes)");
        System.out.println("=====");
        line("executor CPU", "total | task threads | shuffle networking | virtual-thread carriers | other Java "
                + "threads   [s, since the executor started: warm-up and timed runs]");
        System.out.println("-----");
        for (ExecutorCpu c : cpu) {
            line(c.executor(), String.format(Locale.ROOT, "%.1f s | %.1f s | %.1f s (%.1f %%) | %.1f s | %.1f s",
                    c.totalS(), c.tasksS(), c.networkS(), 100 * c.networkS() / c.totalS(), c.carriersS(),
                    c.otherS()));
        }
        line("", (backend.equals("ucx4j") ? "shuffle networking: ucx4j's progress thread (its block server and "
                + "readers run on virtual threads: carriers)" : "shuffle networking: Netty's shuffle-client and "
                + "shuffle-server threads") + "; the total's rest: JIT compiler and GC threads");
    }

    /** key, an int64 payload (as in the seed), and the optional padding column. */
    private static String[] columns(String key, String[] pad) {
        String[] c = new String[2 + pad.length];
        c[0] = key;
        c[1] = "id as payload";
        System.arraycopy(pad, 0, c, 2, pad.length);
        return c;
    }

    private static String pad2(String executorId) {
        return executorId.length() == 1 ? "0" + executorId : executorId;
    }

    private static void line(String key, String value) {
        System.out.printf(Locale.ROOT, "%-18s | %s%n", key, value);
    }

    private static double median(double[] v) {
        double[] s = v.clone();
        Arrays.sort(s);
        return s.length % 2 == 1 ? s[s.length / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
    }
}
