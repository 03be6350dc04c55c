package org.apache.spark.shuffle.ucx4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.IntStream;

import org.apache.spark.FetchFailed;
import org.apache.spark.SparkEnv;
import org.apache.spark.api.java.JavaPairRDD;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.scheduler.ExecutorDecommissionInfo;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerExecutorRemoved;
import org.apache.spark.scheduler.SparkListenerStageSubmitted;
import org.apache.spark.scheduler.SparkListenerTaskEnd;
import org.apache.spark.scheduler.cluster.CoarseGrainedSchedulerBackend;
import org.apache.spark.sql.SparkSession;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import scala.Option;
import scala.Tuple2;

/**
 * Decommissioning on {@code local-cluster[3,1,1024]} with the plug-in: an executor that holds map output is
 * decommissioned, Spark migrates its shuffle files to another executor and updates their location, and the next job
 * on that shuffle fetches them from there (over ucx4j where that executor serves blocks, Spark's client where it
 * does not) without a fetch failure or running the map stage again.
 */
@Timeout(value = 5, unit = TimeUnit.MINUTES)
class UcxDecommissionTest {

    @Test
    void blocksMigratedOffADecommissionedExecutorAreFetchedFromTheirNewHome() throws Exception {
        SparkSession spark = Clusters.start(Clusters.conf("ucx4j-decommission", Clusters.UCX, 3)
                .set("spark.decommission.enabled", "true")
                .set("spark.storage.decommission.enabled", "true")
                .set("spark.storage.decommission.shuffleBlocks.enabled", "true")
                .set("spark.storage.decommission.rddBlocks.enabled", "false")
                // migrate at once (Spark's default retries migration every 30 s)
                .set("spark.storage.decommission.replicationReattemptInterval", "1s"));
        try {
            JavaSparkContext sc = JavaSparkContext.fromSparkContext(spark.sparkContext());
            JavaPairRDD<Integer, Long> sums = sc.parallelize(IntStream.range(0, 300_000).boxed().toList(), 6)
                    .mapToPair(i -> new Tuple2<>(i % 100, (long) i)).reduceByKey(Long::sum, 6);
            assertEquals(100, sums.count()); // the map output is on disk now

            List<Tuple2<String, Integer>> files = ExecutorProbe.onEach(spark.sparkContext(),
                    () -> List.of(new Tuple2<>(SparkEnv.get().executorId(), shuffleDataFiles())));
            String victim = files.stream().filter(t -> t._2() > 0).map(Tuple2::_1).findFirst()
                    .orElseThrow(() -> new AssertionError("no executor holds map output: " + files));

            CountDownLatch victimGone = new CountDownLatch(1);
            AtomicInteger stagesRun = new AtomicInteger();
            AtomicInteger fetchFailures = new AtomicInteger();
            java.util.concurrent.atomic.AtomicLong remoteBytes = new java.util.concurrent.atomic.AtomicLong();
            SparkListener watch = new SparkListener() {
                @Override
                public void onExecutorRemoved(SparkListenerExecutorRemoved removed) {
                    if (removed.executorId().equals(victim)) {
                        victimGone.countDown();
                    }
                }

                @Override
                public void onStageSubmitted(SparkListenerStageSubmitted s) {
                    stagesRun.incrementAndGet();
                }

                @Override
                public void onTaskEnd(SparkListenerTaskEnd end) {
                    if (end.reason() instanceof FetchFailed) {
                        fetchFailures.incrementAndGet();
                    }
                    if (end.taskMetrics() != null) {
                        remoteBytes.addAndGet(end.taskMetrics().shuffleReadMetrics().remoteBytesRead());
                    }
                }
            };
            spark.sparkContext().addSparkListener(watch);
            try {
                CoarseGrainedSchedulerBackend backend =
                        (CoarseGrainedSchedulerBackend) spark.sparkContext().schedulerBackend();
                assertTrue(backend.decommissionExecutor(victim, new ExecutorDecommissionInfo("test", Option.empty()),
                        false, false), "Spark did not take executor " + victim + " for decommissioning");
                // it exits once its shuffle files live elsewhere (the Master may then start a new executor on
                // the freed worker: it holds no map output and changes nothing below)
                assertTrue(victimGone.await(2, TimeUnit.MINUTES), "executor " + victim + " never finished "
                        + "decommissioning");
                stagesRun.set(0);
                remoteBytes.set(0);
                long total = sums.values().collect().stream().mapToLong(Long::longValue).sum();
                Clusters.awaitListeners(spark);
                int stages = stagesRun.get();
                assertEquals(300_000L * 299_999 / 2, total, "records lost with the migration");
                assertEquals(0, fetchFailures.get(), "a migrated block could not be fetched");
                assertEquals(1, stages, "the map stage ran again: its output was not found where Spark moved it");
                assertTrue(remoteBytes.get() > 0, "no block crossed executors");
                // the executors holding the migrated files serve blocks over ucx4j: reducers fetched them so
                List<String> holdersWithoutServer = ExecutorProbe.onEach(spark.sparkContext(), () ->
                        shuffleDataFiles() > 0 && UcxShuffleManager.localServerAddress() == null
                                ? List.of(SparkEnv.get().executorId()) : List.<String>of());
                assertEquals(List.of(), holdersWithoutServer, "executors hold shuffle files without a ucx4j server");
            } finally {
                spark.sparkContext().removeSparkListener(watch);
            }
        } finally {
            spark.stop();
        }
    }

    /** This executor's shuffle data files (map output written or migrated here). */
    private static int shuffleDataFiles() {
        List<File> all = scala.jdk.javaapi.CollectionConverters.asJava(
                SparkEnv.get().blockManager().diskBlockManager().getAllFiles());
        return (int) all.stream().filter(f -> f.getName().startsWith("shuffle_") && f.getName().endsWith(".data"))
                .count();
    }

}
