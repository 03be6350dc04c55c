package org.apache.spark.shuffle.ucx4j;

import static org.junit.jupiter.api.Assertions.assertEquals;

import org.apache.spark.SparkConf;
import org.junit.jupiter.api.Test;

/** The plug-in's settings as they reach ucx4j's options. */
class UcxShuffleConfTest {
    @Test
    void thePullBudgetLetsEveryPartOfARequestLandAtOnceUnlessSet() {
        SparkConf conf = new SparkConf(false);
        assertEquals(32L << 20, new UcxShuffleConf(conf).ucxOptions().pullBudget(), "4 parts of 8 MiB");
        conf.set(UcxShuffleConf.PART_SIZE, "2m").set(UcxShuffleConf.PARTS_IN_FLIGHT, "3");
        assertEquals(6L << 20, new UcxShuffleConf(conf).ucxOptions().pullBudget());
        conf.set(UcxShuffleConf.PULL_BUDGET, "100m");
        assertEquals(100L << 20, new UcxShuffleConf(conf).ucxOptions().pullBudget());
    }

    /** Shuffle blocks are host memory, so ucx4j promises UCX as much (no per-call memory-type lookup on GPU nodes). */
    @Test
    void shuffleBuffersArePromisedToBeHostMemory() {
        org.junit.jupiter.api.Assertions.assertTrue(new UcxShuffleConf(new SparkConf(false)).ucxOptions().hostMemoryOnly());
        org.junit.jupiter.api.Assertions.assertFalse(org.ucx4j.UcxOptions.defaults().hostMemoryOnly(),
                "applications' buffers may be a GPU's: UCX looks them up unless promised otherwise");
    }

    /** Blocks go by rendezvous straight into the reducer's pool: an eager one would be copied there a second time. */
    @Test
    void blocksAreNotSentEagerly() {
        org.junit.jupiter.api.Assertions.assertFalse(new UcxShuffleConf(new SparkConf(false)).ucxOptions().eagerSends());
        org.junit.jupiter.api.Assertions.assertTrue(org.ucx4j.UcxOptions.defaults().eagerSends());
    }

    /** A request's idle timeout is Spark's for shuffle connections, as Netty's client takes it. */
    @Test
    void theIdleTimeoutIsTheShuffleConnectionTimeoutThenTheNetworkTimeout() {
        SparkConf conf = new SparkConf(false);
        assertEquals(java.time.Duration.ofSeconds(120), new UcxShuffleConf(conf).networkTimeout());
        conf.set("spark.network.timeout", "300s");
        assertEquals(java.time.Duration.ofSeconds(300), new UcxShuffleConf(conf).networkTimeout());
        conf.set("spark.shuffle.io.connectionTimeout", "10min");
        assertEquals(java.time.Duration.ofSeconds(600), new UcxShuffleConf(conf).networkTimeout());
        conf.set("spark.shuffle.io.connectionTimeout", "600"); // seconds, as Spark reads a number without a unit
        assertEquals(java.time.Duration.ofSeconds(600), new UcxShuffleConf(conf).networkTimeout());
        conf.set("spark.shuffle.io.connectionTimeout", "1500ms");
        assertEquals(java.time.Duration.ofMillis(1500), new UcxShuffleConf(conf).networkTimeout());
        // under a second Netty's client (whole seconds, 0 = off) has no idle timeout: neither has ucx4j's
        for (String off : new String[] {"500ms", "0"}) {
            conf.set("spark.shuffle.io.connectionTimeout", off);
            assertEquals(java.time.Duration.ZERO, new UcxShuffleConf(conf).networkTimeout(), off);
            new UcxShuffleConf(conf).validate(); // accepted, with a warning
        }
    }

    /** ucx4j's own network timeouts read a number without a unit as seconds too, as Spark reads its own. */
    @Test
    void connectAndLivenessTimeoutsWithoutAUnitAreSeconds() {
        SparkConf conf = new SparkConf(false);
        assertEquals(java.time.Duration.ofSeconds(10), new UcxShuffleConf(conf).connectTimeout());
        assertEquals(java.time.Duration.ofSeconds(30), new UcxShuffleConf(conf).livenessTimeout());
        conf.set(UcxShuffleConf.CONNECT_TIMEOUT, "30");
        conf.set(UcxShuffleConf.LIVENESS_TIMEOUT, "60");
        assertEquals(java.time.Duration.ofSeconds(30), new UcxShuffleConf(conf).connectTimeout());
        assertEquals(java.time.Duration.ofSeconds(60), new UcxShuffleConf(conf).livenessTimeout());
        conf.set(UcxShuffleConf.CONNECT_TIMEOUT, "2500ms");
        conf.set(UcxShuffleConf.LIVENESS_TIMEOUT, "2min");
        assertEquals(java.time.Duration.ofMillis(2500), new UcxShuffleConf(conf).connectTimeout());
        assertEquals(java.time.Duration.ofSeconds(120), new UcxShuffleConf(conf).livenessTimeout());
        new UcxShuffleConf(conf).validate();
    }

    @Test
    void aServerSendsEachReducerTwiceThePullBudgetAtOnceUnlessSet() {
        SparkConf conf = new SparkConf(false);
        assertEquals(64L << 20, new UcxShuffleConf(conf).serverBytesInFlight());
        conf.set(UcxShuffleConf.PULL_BUDGET, "10m");
        assertEquals(20L << 20, new UcxShuffleConf(conf).serverBytesInFlight());
        conf.set(UcxShuffleConf.SERVER_BYTES_IN_FLIGHT, "1m");
        assertEquals(1L << 20, new UcxShuffleConf(conf).serverBytesInFlight());
    }
}
