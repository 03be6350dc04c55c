package org.apache.spark.shuffle.ucx4j;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.stream.IntStream;

import org.apache.spark.SparkContext;
import org.apache.spark.SparkEnv;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.api.java.function.Function0;

import scala.Tuple2;

/** Driver-side helpers to look into executor JVMs: wait for them, and ask each one something. */
public final class ExecutorProbe {
    private ExecutorProbe() {
    }

    /** Waits until {@code n} executors registered, so jobs really spread over processes. */
    public static void awaitExecutors(SparkContext sc, int n, Duration timeout) throws InterruptedException {
        long deadline = System.nanoTime() + timeout.toNanos();
        while (sc.getExecutorIds().size() < n) {
            if (System.nanoTime() - deadline > 0) {
                throw new IllegalStateException("only " + sc.getExecutorIds().size() + " of " + n
                        + " executors came up within " + timeout.toSeconds() + " s");
            }
            Thread.sleep(100);
        }
    }

    /**
     * Runs {@code probe} in every executor JVM — one short job with eight 50 ms tasks per executor, enough for each
     * to take some — and concatenates the answers, one per executor, in executor-id order.
     */
    public static <T> List<T> onEach(SparkContext sc, Function0<List<T>> probe) {
        int n = Math.max(2, sc.getExecutorIds().size()) * 8;
        List<Tuple2<String, List<T>>> perTask = JavaSparkContext.fromSparkContext(sc)
                .parallelize(IntStream.range(0, n).boxed().toList(), n)
                .map(i -> {
                    Thread.sleep(50);
                    return new Tuple2<>(SparkEnv.get().executorId(), probe.call());
                }).collect();
        Map<String, List<T>> byExecutor = new TreeMap<>();
        perTask.forEach(t -> byExecutor.putIfAbsent(t._1(), t._2()));
        List<T> out = new ArrayList<>();
        byExecutor.values().forEach(out::addAll);
        return out;
    }
}
