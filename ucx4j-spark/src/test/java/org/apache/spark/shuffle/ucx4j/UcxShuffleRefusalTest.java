package org.apache.spark.shuffle.ucx4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import java.util.stream.IntStream;

import org.apache.spark.SparkConf;
import org.apache.spark.SparkEnv;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.sql.SparkSession;
import org.junit.jupiter.api.Test;

import scala.Tuple2;

/** Where ucx4j must not carry the shuffle (network encryption, the external shuffle service), it refuses or falls back. */
class UcxShuffleRefusalTest {

    private static SparkConf encrypted() {
        return new SparkConf().setMaster("local[2]").setAppName("refusal")
                .set("spark.shuffle.manager", Clusters.UCX)
                .set("spark.ui.enabled", "false")
                .set("spark.authenticate", "true")
                .set("spark.authenticate.secret", "s3cret")
                .set("spark.network.crypto.enabled", "true");
    }

    @Test
    void networkEncryptionIsRefusedWithTheReasonAndTheWayOut() {
        IllegalStateException e = assertThrows(IllegalStateException.class,
                () -> new UcxShuffleManager(encrypted(), true));
        assertTrue(e.getMessage().contains("spark.network.crypto.enabled"), e.getMessage());
        assertTrue(e.getMessage().contains("UCX does not encrypt"), e.getMessage());
        assertTrue(e.getMessage().contains("spark.ucx4j.fallback=true"), e.getMessage());
    }

    /** TLS for RPC and SASL encryption ask for encrypted block transfers too: refused the same way. */
    @Test
    void everyOtherKindOfNetworkEncryptionIsRefusedToo() {
        for (String key : List.of("spark.ssl.rpc.enabled", "spark.authenticate.enableSaslEncryption")) {
            SparkConf conf = new SparkConf().setMaster("local[2]").setAppName("refusal")
                    .set("spark.shuffle.manager", Clusters.UCX).set(key, "true");
            IllegalStateException e = assertThrows(IllegalStateException.class,
                    () -> new UcxShuffleManager(conf, true));
            assertTrue(e.getMessage().contains(key) && e.getMessage().contains("UCX does not encrypt"),
                    e.getMessage());
        }
    }

    /**
     * A missing UCX is the host's own: it decides for a JVM that moves shuffle data (an executor, a driver running
     * tasks itself), never for a cluster's driver (a client on an edge node), whose executors may have UCX; the
     * settings' reasons hold everywhere.
     */
    @Test
    void onlyAJvmThatMovesShuffleDataNeedsUcx() {
        for (String master : List.of("spark://host:7077", "local-cluster[2,1,1024]", "yarn", "local[2]")) {
            UcxShuffleConf c = new UcxShuffleConf(new SparkConf(false).set("spark.master", master));
            boolean local = master.startsWith("local[");
            assertEquals(local, UcxShuffleManager.refusal(c, true, false) != null, master + ": driver without UCX");
            assertTrue(UcxShuffleManager.refusal(c, false, false).contains("UCX is not available"), master);
            assertEquals(null, UcxShuffleManager.refusal(c, true, true));
            assertEquals(null, UcxShuffleManager.refusal(c, false, true));
            UcxShuffleConf enc = new UcxShuffleConf(new SparkConf(false).set("spark.master", master)
                    .set("spark.network.crypto.enabled", "true"));
            assertTrue(UcxShuffleManager.refusal(enc, true, true).contains("spark.network.crypto.enabled"));
        }
        assertTrue(UcxDriverEndpoint.Address.servedByNetty("3", "h").isServedByNetty());
        assertFalse(new UcxDriverEndpoint.Address("3", "h", 4000).isServedByNetty());
    }

    @Test
    void theExternalShuffleServiceIsRefusedToo() {
        SparkConf ess = new SparkConf().setMaster("local[2]").setAppName("refusal")
                .set("spark.shuffle.manager", Clusters.UCX)
                .set("spark.shuffle.service.enabled", "true");
        IllegalStateException e = assertThrows(IllegalStateException.class, () -> new UcxShuffleManager(ess, true));
        assertTrue(e.getMessage().contains("spark.shuffle.service.enabled"), e.getMessage());
        assertTrue(e.getMessage().contains("spark.ucx4j.fallback=true"), e.getMessage());
    }

    /**
     * A bad setting fails the manager at once, naming the key, its value and what it takes, with the fallback on as
     * well (it is the user's to fix, not a reason for Spark's shuffle), instead of a task later or a quiet fallback.
     */
    @Test
    void badSettingsAreRefusedAtStartWithTheKeyEvenWithTheFallback() {
        String[][] bad = {
            {UcxShuffleConf.PORT, "70000", "0 to 65535 expected"},
            {UcxShuffleConf.PORT, "-1", "0 to 65535 expected"},
            {UcxShuffleConf.PARTS_IN_FLIGHT, "0", "at least 1 expected"},
            {UcxShuffleConf.PARTS_IN_FLIGHT, "four", "four"},
            {UcxShuffleConf.PART_SIZE, "0", "1 to 1073741824 expected"},
            {UcxShuffleConf.PART_SIZE, "2g", "1 to 1073741824 expected"}, // one part is one ByteBuffer
            {UcxShuffleConf.RECEIVE_CACHE, "-1", "Size must be specified"},
            {UcxShuffleConf.PROGRESS_MODE, "caller", "backoff, blocking or polling expected"},
            {UcxShuffleConf.PROGRESS_MODE, "fast", "backoff, blocking or polling expected"},
            {UcxShuffleConf.CONNECT_TIMEOUT, "0s", "at least 1 expected"},
            {UcxShuffleConf.LIVENESS_TIMEOUT, "2d", "livenessTimeout"},
            {UcxShuffleConf.SERVER_BYTES_IN_FLIGHT, "0", "at least 1 expected"},
            {UcxShuffleConf.FALLBACK, "yes", "yes"},
            {UcxShuffleConf.BIND_ADDRESS, "10.0.0.300", "Invalid IP address literal"},
            {UcxShuffleConf.BIND_ADDRESS, "exec host", "a host name or an IP address expected"},
            {UcxShuffleConf.UCX_PREFIX + "RNDV_THRESH", "lots", "RNDV_THRESH=lots refused"},
        };
        for (String[] b : bad) {
            SparkConf conf = new SparkConf(false).set(UcxShuffleConf.FALLBACK, "true").set(b[0], b[1]);
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> new UcxShuffleManager(conf, false, true), b[0] + "=" + b[1]);
            assertTrue(e.getMessage().contains(b[0] + "=" + b[1]), e.getMessage());
            assertTrue(e.getMessage().contains(b[2]), e.getMessage());
        }
        // a key that is not one of the plug-in's (a typo) is refused too, naming it
        SparkConf typo = new SparkConf(false).set(UcxShuffleConf.FALLBACK, "true")
                .set("spark.ucx4j.serverBytesInflight", "1m");
        IllegalArgumentException unknown = assertThrows(IllegalArgumentException.class,
                () -> new UcxShuffleManager(typo, false, true));
        assertTrue(unknown.getMessage().contains("unknown setting spark.ucx4j.serverBytesInflight"),
                unknown.getMessage());
        SparkConf fine = new SparkConf(false).set(UcxShuffleConf.PORT, "65535")
                .set(UcxShuffleConf.PROGRESS_MODE, " Blocking").set(UcxShuffleConf.RECEIVE_CACHE, "0")
                .set(UcxShuffleConf.BIND_ADDRESS, "exec-1.cluster.local")
                .set(UcxShuffleConf.UCX_PREFIX + "RNDV_THRESH", "64k")
                .set(UcxShuffleConf.UCX_PREFIX + "POSIX_FIFO_SIZE", "512");
        new UcxShuffleConf(fine).validate();
        assertEquals(org.ucx4j.ProgressMode.BLOCKING, new UcxShuffleConf(fine).progressMode());
    }

    @Test
    void theApplicationDoesNotStartWithoutFallback() {
        Exception e = assertThrows(Exception.class, () -> SparkSession.builder().config(encrypted()).getOrCreate());
        Throwable t = e;
        while (t.getCause() != null && !(t instanceof IllegalStateException)) {
            t = t.getCause();
        }
        assertTrue(String.valueOf(t.getMessage()).contains("spark.network.crypto.enabled"), String.valueOf(t));
    }

    /**
     * The fallback is for UCX failing on an executor. A task killed while its executor's first start waits for the
     * driver's answer (or a driver that does not answer) fails that task only: the next task starts ucx4j, where
     * the executor used to fall back to Spark's shuffle for good.
     */
    @Test
    void aTaskKilledDuringTheFirstStartDoesNotTurnTheFallbackOn() {
        SparkConf conf = new SparkConf().setMaster("local[2,4]").setAppName("first-start")
                .set("spark.shuffle.manager", Clusters.UCX).set("spark.ui.enabled", "false")
                .set(UcxShuffleConf.FALLBACK, "true");
        UcxShuffleTransport.interruptNextRegistration = true;
        SparkSession spark = SparkSession.builder().config(conf).getOrCreate();
        try {
            JavaSparkContext sc = JavaSparkContext.fromSparkContext(spark.sparkContext());
            List<Tuple2<Integer, Integer>> counts = sc.parallelize(IntStream.range(0, 1000).boxed().toList(), 4)
                    .mapToPair(i -> new Tuple2<>(i % 10, 1)).reduceByKey(Integer::sum, 3).collect();
            assertFalse(UcxShuffleTransport.interruptNextRegistration, "the first registration was interrupted");
            assertEquals(10, counts.size());
            assertTrue(counts.stream().allMatch(c -> c._2() == 100), counts.toString());
            assertTrue(UcxShuffleManager.localTransport() != null, "ucx4j started on a later task");
        } finally {
            UcxShuffleTransport.interruptNextRegistration = false;
            spark.stop();
        }
    }

    /**
     * A task that waits for another task's start of the executor's transport (which may itself wait up to Spark's
     * RPC timeout for the driver) ends its wait when it is killed (interrupted), with its interrupt status kept.
     */
    @Test
    void aTaskKilledWhileAnotherStartsTheTransportStopsWaiting() throws Exception {
        UcxShuffleManager m = new UcxShuffleManager(new SparkConf(false), false, true);
        m.startLock.lock(); // the other task's start, waiting for the driver
        try {
            AtomicReference<Throwable> failure = new AtomicReference<>();
            AtomicBoolean stillInterrupted = new AtomicBoolean();
            Thread task = Thread.ofPlatform().start(() -> {
                try {
                    UcxShuffleManager.startLocalTransport();
                } catch (Throwable t) {
                    failure.set(t);
                    stillInterrupted.set(Thread.currentThread().isInterrupted());
                }
            });
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (!m.startLock.hasQueuedThread(task)) {
                assertTrue(System.nanoTime() < deadline && task.isAlive(), "the task never waited for the start");
                Thread.sleep(1);
            }
            task.interrupt(); // Spark kills a task by interrupting it
            task.join(30_000);
            assertFalse(task.isAlive(), "the killed task still waits for the other task's start");
            Throwable t = failure.get();
            assertTrue(t instanceof IllegalStateException && t.getCause() instanceof InterruptedException,
                    String.valueOf(t));
            assertTrue(String.valueOf(t.getMessage()).contains("interrupted while waiting"), t.getMessage());
            assertTrue(stillInterrupted.get(), "the interrupt status was lost");
        } finally {
            m.startLock.unlock();
            m.stop();
        }
    }

    @Test
    void withFallbackTheBuiltInShuffleCarriesTheJob() {
        SparkSession spark = SparkSession.builder().config(encrypted().set(UcxShuffleConf.FALLBACK, "true"))
                .getOrCreate();
        try {
            UcxShuffleManager m = (UcxShuffleManager) SparkEnv.get().shuffleManager();
            assertFalse(m.isEnabled());
            JavaSparkContext sc = JavaSparkContext.fromSparkContext(spark.sparkContext());
            List<Tuple2<Integer, Integer>> counts = sc.parallelize(IntStream.range(0, 1000).boxed().toList(), 4)
                    .mapToPair(i -> new Tuple2<>(i % 10, 1)).reduceByKey(Integer::sum, 3).collect();
            assertEquals(10, counts.size());
            assertTrue(counts.stream().allMatch(c -> c._2() == 100), counts.toString());
            assertTrue(UcxShuffleManager.localTraffic().isEmpty(), "ucx4j carried traffic despite the fallback");
        } finally {
            spark.stop();
        }
    }
}
