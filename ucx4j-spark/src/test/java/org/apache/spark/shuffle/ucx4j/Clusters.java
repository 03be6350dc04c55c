package org.apache.spark.shuffle.ucx4j;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;

import org.apache.spark.SparkConf;
import org.apache.spark.sql.SparkSession;

/** Spark sessions on {@code local-cluster}: a real Master, Worker and executor JVMs on this machine. */
final class Clusters {
    static final String UCX = UcxShuffleManager.class.getName();
    /** Every executor JVM needs native access for ucx4j. */
    static final String EXECUTOR_JAVA_OPTIONS = "--enable-native-access=ALL-UNNAMED";

    private Clusters() {
    }

    static SparkConf conf(String appName, String shuffleManager, int executors) {
        try {
            Files.createDirectories(Path.of(System.getProperty("java.io.tmpdir")));
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        return new SparkConf()
                .setMaster("local-cluster[" + executors + ",1,1024]")
                .setAppName(appName)
                .set("spark.shuffle.manager", shuffleManager)
                // same-host blocks must cross processes through the shuffle client, not be read from disk
                .set("spark.shuffle.readHostLocalDisk", "false")
                .set("spark.executor.extraJavaOptions", EXECUTOR_JAVA_OPTIONS)
                .set("spark.sql.autoBroadcastJoinThreshold", "-1")
                .set("spark.ui.enabled", "false");
    }

    static SparkSession start(SparkConf conf) {
        SparkSession spark = SparkSession.builder().config(conf).getOrCreate();
        try {
            ExecutorProbe.awaitExecutors(spark.sparkContext(),
                    Integer.parseInt(conf.get("spark.master").replaceAll("\\D*(\\d+),.*", "$1")), Duration.ofMinutes(1));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
        return spark;
    }

    /** Waits until every listener heard of every event so far (Spark's listener bus is asynchronous). */
    static void awaitListeners(SparkSession spark) {
        try {
            spark.sparkContext().listenerBus().waitUntilEmpty();
        } catch (java.util.concurrent.TimeoutException e) {
            throw new IllegalStateException("Spark's listeners did not catch up", e);
        }
    }
}
