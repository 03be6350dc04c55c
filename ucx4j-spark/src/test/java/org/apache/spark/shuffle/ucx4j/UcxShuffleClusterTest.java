package org.apache.spark.shuffle.ucx4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.IntStream;
import java.util.zip.CRC32;

import org.apache.spark.FetchFailed;
import org.apache.spark.api.java.JavaPairRDD;
import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.executor.ShuffleReadMetrics;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerExecutorRemoved;
import org.apache.spark.scheduler.SparkListenerStageSubmitted;
import org.apache.spark.scheduler.SparkListenerTaskEnd;
import org.apache.spark.sql.SparkSession;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;
import org.junit.jupiter.api.Timeout;
import org.ucx4j.AmMessage;
import org.ucx4j.Endpoint;
import org.ucx4j.Ucx;
import org.ucx4j.UcxException;
import org.ucx4j.UcxOptions;

import scala.Tuple2;

/**
 * The plug-in on {@code local-cluster[2,1,1024]}: every job gives the same answer as Spark's built-in shuffle, blocks
 * really cross executor processes over ucx4j (authenticated with the application secret), fetch metrics reach Spark,
 * a few hundred MB shuffle intact, a connection dropped between live executors is asked again rather than failed,
 * and an executor SIGKILLed while its blocks are being fetched costs a fetch failure and a stage retry, not a hang.
 */
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
@Timeout(value = 5, unit = java.util.concurrent.TimeUnit.MINUTES)
class UcxShuffleClusterTest {
    private static final String SECRET = "ucx4j-test-secret";
    private static Map<String, List<String>> builtIn;
    private static SparkSession spark;
    private static final Metrics METRICS = new Metrics();
    /**
     * One fixed block-server port for both executors of this host: the second takes the next free one. Chosen
     * right before the cluster that uses it starts (the built-in one before it binds ephemeral ports too).
     */
    private static int PORT;

    @BeforeAll
    static void runBuiltInThenStartUcx() {
        SparkSession sort = Clusters.start(Clusters.conf("built-in", "sort", 2));
        try {
            builtIn = Workloads.run(sort);
        } finally {
            sort.stop();
        }
        PORT = freePort();
        spark = Clusters.start(Clusters.conf("ucx4j", Clusters.UCX, 2)
                .set("spark.authenticate", "true")
                .set("spark.authenticate.secret", SECRET)
                // requests above 4 MiB are fetched to disk, streamed in 1 MiB parts, 3 in flight: the
                // few-hundred-MB shuffle takes that path, the small jobs stay in memory
                .set("spark.network.maxRemoteBlockSizeFetchToMem", "4m")
                .set(UcxShuffleConf.PART_SIZE, "1m")
                .set(UcxShuffleConf.PARTS_IN_FLIGHT, "3")
                // servers send each reducer 2 MiB at a time: both paths wait for room (parts: 3 MiB in flight)
                .set(UcxShuffleConf.SERVER_BYTES_IN_FLIGHT, "2m")
                .set(UcxShuffleConf.PORT, String.valueOf(PORT))
                // a dropped connection is asked again a second later (Spark's default: 5 s)
                .set("spark.shuffle.io.retryWait", "1s"));
        spark.sparkContext().addSparkListener(METRICS);
    }

    @Test
    @Order(11)
    void anInstanceThatFailsWhileRegisteringIsReplacedAndAStopDoesNotWaitForTheDriver() {
        // last: it closes each executor's transport (Spark's own stop closes it again)
        List<String> outcome = ExecutorProbe.onEach(spark.sparkContext(), UcxShuffleClusterTest::slowRegistrations);
        assertFalse(outcome.isEmpty(), "no executor answered");
        for (String o : outcome) {
            assertEquals("replaced while registering: +2/held: 2/close returned: true/late instances closed: 1/"
                    + "live instances: 0/replacement ended: true", o);
        }
    }

    /** What {@link #slowRegistrations} saw in this executor JVM (its first task acts, later ones report it). */
    private static String slowRegistrationsOutcome;

    /**
     * In an executor, with a driver slow to take registrations: a replacement instance whose shared memory fails
     * while it registers is replaced in turn once it is current; and an executor that stops while a replacement
     * registers returns without waiting for the driver, the replacement being closed once its registration ends.
     */
    private static synchronized List<String> slowRegistrations() throws Exception {
        if (slowRegistrationsOutcome == null) {
            // (started here if need be: the executor that replaced the one killed above may have run no shuffle task)
            UcxShuffleTransport t = UcxShuffleManager.startLocalTransport();
            int generation = t.generation();
            java.util.concurrent.CountDownLatch first = new java.util.concurrent.CountDownLatch(1);
            t.holdRegistrations(first);
            Thread replace = Thread.ofVirtual().start(() -> t.reopen(generation, "test: a slow driver"));
            awaitHeld(t, 1);
            t.failRegistering("test: as if its shared memory failed while it registered");
            t.holdRegistrations(null);
            first.countDown();
            replace.join(Duration.ofSeconds(30));
            int replaced = t.generation() - generation;

            java.util.concurrent.CountDownLatch second = new java.util.concurrent.CountDownLatch(1);
            t.holdRegistrations(second);
            int now = t.generation();
            replace = Thread.ofVirtual().start(() -> t.reopen(now, "test: a slow driver, again"));
            awaitHeld(t, 2);
            Thread stop = Thread.ofVirtual().start(t::close);
            boolean stopped = stop.join(Duration.ofSeconds(30)); // until now, close waited for the registration
            second.countDown();
            boolean ended = replace.join(Duration.ofSeconds(30));
            slowRegistrationsOutcome = "replaced while registering: +" + replaced + "/held: " + t.registrationsHeld()
                    + "/close returned: " + stopped + "/late instances closed: " + t.lateInstancesClosed()
                    + "/live instances: " + t.liveInstances() + "/replacement ended: " + ended;
        }
        return List.of(slowRegistrationsOutcome);
    }

    private static void awaitHeld(UcxShuffleTransport t, int n) throws InterruptedException {
        long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
        while (t.registrationsHeld() < n && System.nanoTime() - deadline < 0) {
            Thread.sleep(10);
        }
    }

    @AfterAll
    static void stop() {
        if (spark != null) {
            spark.stop();
        }
    }

    @Test
    @Order(1)
    void everyJobMatchesTheBuiltInShuffle() {
        Map<String, List<String>> ucx = Workloads.run(spark);
        assertEquals(builtIn.keySet(), ucx.keySet());
        for (String job : builtIn.keySet()) {
            assertTrue(!builtIn.get(job).isEmpty(), job + " produced nothing");
            assertEquals(builtIn.get(job), ucx.get(job), job + " differs from the built-in shuffle");
        }
    }

    @Test
    @Order(2)
    void blocksCrossExecutorsOverUcxAndMetricsReachSpark() {
        List<PeerTraffic> traffic = UcxShuffleManager.clusterTraffic(spark.sparkContext());
        long fetched = traffic.stream().filter(PeerTraffic::fetched).mapToLong(t -> t.stats().bytesReceived()).sum();
        long served = traffic.stream().filter(t -> !t.fetched()).mapToLong(t -> t.stats().bytesSent()).sum();
        assertTrue(fetched > 0, "no block was fetched over ucx4j: " + traffic);
        assertTrue(served > 0, "no block was served over ucx4j: " + traffic);
        assertTrue(traffic.stream().filter(PeerTraffic::fetched).map(PeerTraffic::executor).distinct().count() == 2,
                "both executors fetch from each other: " + traffic);
        assertTrue(METRICS.remoteBytes.get() > 0, "Spark saw no remote shuffle bytes");
        assertTrue(METRICS.remoteBlocks.get() > 0, "Spark saw no remote shuffle blocks");
        assertTrue(METRICS.remoteBytes.get() > METRICS.remoteBytesToDisk.get(), "no block was fetched to memory");
        // what Spark counted as remote bytes came over ucx4j (payloads; requests and headers are extra)
        assertTrue(fetched >= METRICS.remoteBytes.get(), "ucx4j fetched " + fetched + " B, Spark counted "
                + METRICS.remoteBytes.get() + " B remote");
    }

    @Test
    @Order(3)
    void twoExecutorsGivenOnePortListenOnItAndTheNextAndUnknownExecutorsGoToSparksClient() {
        List<Integer> ports = ExecutorProbe.onEach(spark.sparkContext(),
                () -> List.of(UcxShuffleManager.localTransport().address().port()));
        assertEquals(2, ports.size(), String.valueOf(ports));
        assertTrue(ports.contains(PORT), "one executor has the configured port " + PORT + ": " + ports);
        assertTrue(ports.stream().allMatch(p -> p >= PORT && p <= PORT + 16) && ports.get(0) - ports.get(1) != 0,
                "the other one a port after it: " + ports);
        // an executor the driver knows no block server of (blocks migrated to one that never ran a shuffle task, or
        // one that is gone) is fetched from with Spark's own client, which serves the first and fails the second
        assertEquals(List.of(true, true), ExecutorProbe.onEach(spark.sparkContext(),
                () -> List.of(UcxShuffleManager.localTransport().servedByNetty("no-such-executor", true))));
    }

    private static int freePort() {
        try (java.net.ServerSocket s = new java.net.ServerSocket(0)) {
            return s.getLocalPort();
        } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
    }

    @Test
    @Order(4)
    void aFewHundredMegabytesShuffleIntact() {
        JavaSparkContext sc = JavaSparkContext.fromSparkContext(spark.sparkContext());
        int partitions = 8;
        int perPartition = 6_000;
        int size = 8 * 1024; // 8 partitions x 6000 x 8 KiB = 375 MiB of incompressible records
        long expected = 0;
        for (int p = 0; p < partitions; p++) {
            for (byte[] r : records(p, perPartition, size)) {
                expected += crc(r);
            }
        }
        JavaRDD<byte[]> data = sc.parallelize(IntStream.range(0, partitions).boxed().toList(), partitions)
                .flatMap(p -> records(p, perPartition, size).iterator());
        long before = METRICS.remoteBytes.get();
        long toDiskBefore = METRICS.remoteBytesToDisk.get();
        long fetchWaitBefore = METRICS.fetchWaitMs.get();
        List<Long> sums = data.repartition(6).map(UcxShuffleClusterTest::crc)
                .mapPartitions(it -> {
                    long s = 0;
                    while (it.hasNext()) {
                        s += it.next();
                    }
                    return List.of(s).iterator();
                }).collect();
        assertEquals(expected, sums.stream().mapToLong(Long::longValue).sum(), "records lost or corrupted");
        Clusters.awaitListeners(spark);
        long remote = METRICS.remoteBytes.get() - before;
        assertTrue(remote > 100L << 20, "only " + remote + " B crossed executors");
        long toDisk = METRICS.remoteBytesToDisk.get() - toDiskBefore;
        assertTrue(toDisk > 100L << 20, "only " + toDisk + " B were streamed to disk");
        assertTrue(METRICS.fetchWaitMs.get() > fetchWaitBefore, "Spark counted no fetch wait for the reducers");
    }

    @Test
    @Order(5)
    void aPeerWithoutTheApplicationSecretIsRefused() {
        List<String> servers = ExecutorProbe.onEach(spark.sparkContext(), () -> {
            String a = UcxShuffleManager.localServerAddress();
            return a == null ? List.<String>of() : List.of(a);
        });
        assertTrue(!servers.isEmpty(), "no executor serves blocks");
        String[] hostPort = servers.get(0).split(":");
        String host = hostPort[0];
        int port = Integer.parseInt(hostPort[1]);
        // the executors' UCX settings (same-host peers must share the shared-memory FIFO size)
        UcxOptions base = new UcxShuffleConf(spark.sparkContext().getConf()).ucxOptions();
        // control: with the application secret, a request for a block that does not exist gets an ERROR answer
        try (Ucx friend = Ucx.open(base.withSecret(SECRET.getBytes(StandardCharsets.UTF_8)));
                Endpoint ep = friend.connect(host, port, Duration.ofSeconds(5))) {
            ep.amSend(Wire.header(Wire.FETCH, 7, 1), "shuffle_999_0_0".getBytes(StandardCharsets.UTF_8));
            try (AmMessage m = ep.amRecv(Duration.ofSeconds(10))) {
                Wire.Header h = Wire.Header.parse(m.headerBytes());
                assertEquals(Wire.ERROR, h.kind());
                assertEquals(7, h.requestId());
                assertEquals(0, h.index());
            }
        }
        // without it (none, or a wrong one) the handshake is rejected before any request is read
        for (UcxOptions o : List.of(base, base.withSecret("guess".getBytes()))) {
            try (Ucx intruder = Ucx.open(o)) {
                UcxException e = assertThrows(UcxException.class,
                        () -> intruder.connect(host, port, Duration.ofSeconds(5)).close());
                assertTrue(e.getMessage().contains("UCS_ERR_REJECTED"), e.getMessage());
            }
        }
    }

    @Test
    @Order(6)
    void anExecutorThatReplacesItsUcxInstanceKeepsServingAndPeersFollowIt() {
        List<String> before = ExecutorProbe.onEach(spark.sparkContext(),
                () -> List.of(UcxShuffleManager.localServerAddress()));
        assertEquals(2, before.size(), "both executors serve blocks: " + before);
        String replaced = spark.sparkContext().getExecutorIds().apply(0);
        // what an executor does when ucx4j finds its shared-memory FIFO wedged (which a test cannot provoke at will
        // in a Spark executor: the core's SharedMemoryWedgeTest does that with a C flooder); the other executor
        // keeps its instance, and its cached connection to the replaced one must move
        // and its first two tries at a new instance fail (the driver does not take the registration): it tries
        // again, 1 s then 2 s later, instead of staying without a block server; a second request meanwhile starts
        // no second chain of tries
        List<String> immediately = ExecutorProbe.onEach(spark.sparkContext(), () -> {
            UcxShuffleTransport t = UcxShuffleManager.localTransport();
            // (each executor runs the probe's tasks one after another: only the first one of each acts)
            if (org.apache.spark.SparkEnv.get().executorId().equals(replaced) && t.failedReopens() == 0
                    && t.generation() == 0) {
                t.failNextReopens(2);
                t.reopen(0, "test: as if the shared-memory FIFO were wedged");
                t.reopen(0, "test: and again");
            }
            return List.of(t.generation() + "/" + t.failedReopens());
        });
        assertEquals(List.of("0/0", "0/1"), immediately.stream().sorted().toList(),
                "the first try failed, and the second request waited for the scheduled one");
        // a new instance and block server (with the fixed port of this session, on the port the old one gave up:
        // a failed try's instance let go of it)
        Data.eventually(() -> ExecutorProbe.onEach(spark.sparkContext(),
                () -> List.of(UcxShuffleManager.localTransport().generation())).stream().sorted().toList()
                .equals(List.of(0, 1)));
        List<Integer> failedTries = ExecutorProbe.onEach(spark.sparkContext(),
                () -> List.of(UcxShuffleManager.localTransport().failedReopens()));
        assertEquals(List.of(0, 2), failedTries.stream().sorted().toList(), "two failed tries, then the third opened");
        assertEquals(before, ExecutorProbe.onEach(spark.sparkContext(),
                () -> List.of(UcxShuffleManager.localServerAddress())), "each executor on its port of before");
        int failuresBefore = METRICS.fetchFailures.get();
        long remoteBefore = METRICS.remoteBytes.get();
        Map<String, List<String>> again = Workloads.run(spark);
        for (String job : builtIn.keySet()) {
            assertEquals(builtIn.get(job), again.get(job), job + " differs from the built-in shuffle after the swap");
        }
        assertTrue(METRICS.remoteBytes.get() > remoteBefore, "nothing crossed executors after the swap");
        assertEquals(failuresBefore, METRICS.fetchFailures.get(),
                "reducers left the old servers (GOAWAY) and found the new ones (driver) without a failed fetch");
        // the replaced instances close once their reducers have gone elsewhere
        Data.eventually(() -> ExecutorProbe.onEach(spark.sparkContext(),
                () -> List.of(UcxShuffleManager.localTransport().liveInstances())).equals(List.of(1, 1)));
    }

    @Test
    @Order(7)
    void aConnectionDroppedBetweenLiveExecutorsIsAskedAgainNotAFetchFailure() {
        // each block server aborts the connection of the next request it gets, unanswered
        ExecutorProbe.onEach(spark.sparkContext(), () -> {
            UcxShuffleManager.localTransport().server().dropNextRequests(1);
            return List.<String>of();
        });
        Clusters.awaitListeners(spark);
        int failuresBefore = METRICS.fetchFailures.get();
        long remoteBefore = METRICS.remoteBytes.get();
        Map<String, List<String>> again;
        List<Integer> left;
        try {
            again = Workloads.run(spark);
        } finally {
            left = ExecutorProbe.onEach(spark.sparkContext(), () -> {
                BlockServer s = UcxShuffleManager.localTransport().server();
                int n = s.requestsToDrop();
                s.dropNextRequests(0); // (a failed run leaves no drop armed for the tests after it)
                return List.of(n);
            });
        }
        for (String job : builtIn.keySet()) {
            assertEquals(builtIn.get(job), again.get(job), job + " differs from the built-in shuffle");
        }
        assertEquals(List.of(0, 0), left, "both servers dropped a connection with a request in flight");
        Clusters.awaitListeners(spark);
        assertTrue(METRICS.remoteBytes.get() > remoteBefore, "nothing crossed executors");
        assertEquals(failuresBefore, METRICS.fetchFailures.get(),
                "the reducers asked again on new connections (spark.shuffle.io.maxRetries) instead of failing");
    }

    @Test
    @Order(8)
    void aBlockCorruptedOnTheWayIsDiagnosedByItsServerAsANetworkIssue() {
        // each block server flips a byte of the next block it sends, and of that block again when it is refetched:
        // Spark's reducer then asks the server (diagnoseCorruption, through Spark's block service) whether the
        // block's checksum on disk still matches, and the stage is retried with the cause named
        ExecutorProbe.onEach(spark.sparkContext(), () -> {
            UcxShuffleManager.localTransport().server().corruptNextBlockTwice();
            return List.<String>of();
        });
        Clusters.awaitListeners(spark);
        int failuresBefore = METRICS.fetchFailures.get();
        METRICS.fetchFailureMessages.clear();
        Map<String, List<String>> again;
        try {
            again = Workloads.run(spark);
        } finally {
            ExecutorProbe.onEach(spark.sparkContext(), () -> {
                UcxShuffleManager.localTransport().server().stopCorrupting();
                return List.<String>of();
            });
        }
        for (String job : builtIn.keySet()) {
            assertEquals(builtIn.get(job), again.get(job), job + " differs from the built-in shuffle");
        }
        Clusters.awaitListeners(spark);
        assertTrue(METRICS.fetchFailures.get() > failuresBefore, "no corrupted block was noticed");
        assertTrue(METRICS.fetchFailureMessages.stream().anyMatch(m -> m.contains("corrupted due to NETWORK_ISSUE")),
                "no diagnosis named the network: " + METRICS.fetchFailureMessages);
    }

    /**
     * A connection to a peer that this executor's own instance replacement cuts short (the instance it chose closed
     * under it) is made again through the new instance: the peer, alive and where it was, is not blamed.
     */
    @Test
    @Order(9)
    void aConnectCutShortByThisExecutorsOwnReplacementGoesThroughTheNewInstance() {
        String acting = spark.sparkContext().getExecutorIds().apply(0);
        String other = spark.sparkContext().getExecutorIds().apply(1);
        List<String> outcome = ExecutorProbe.onEach(spark.sparkContext(),
                () -> org.apache.spark.SparkEnv.get().executorId().equals(acting)
                        ? List.of(connectDuringReplacement(other)) : List.<String>of());
        assertEquals(List.of("connected: usable, cached/instances: +2, 1 live"), outcome);
    }

    /** What {@link #connectDuringReplacement} saw in this executor JVM (its first task acts, later ones report it). */
    private static String connectDuringReplacementOutcome;

    private static synchronized String connectDuringReplacement(String peer) throws Exception {
        if (connectDuringReplacementOutcome == null) {
            UcxShuffleTransport t = UcxShuffleManager.localTransport();
            int before = t.generation();
            t.reopen(before, "test: a fresh instance, no connection to the peer yet");
            java.util.concurrent.CountDownLatch gate = new java.util.concurrent.CountDownLatch(1);
            t.holdConnects(gate);
            java.util.concurrent.CompletableFuture<PeerConnection> connected =
                    new java.util.concurrent.CompletableFuture<>();
            Thread.ofVirtual().start(() -> {
                try {
                    connected.complete(t.peer(peer));
                } catch (Throwable e) {
                    connected.completeExceptionally(e);
                }
            });
            long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
            while (t.connectsHeld() < 1 && System.nanoTime() - deadline < 0) {
                Thread.sleep(10);
            }
            t.holdConnects(null);
            t.reopen(before + 1, "test: replaced while a connect holds the instance it chose");
            while (t.liveInstances() > 1 && System.nanoTime() - deadline < 0) { // the chosen one closed
                Thread.sleep(10);
            }
            gate.countDown();
            String result;
            try {
                PeerConnection c = connected.get(30, java.util.concurrent.TimeUnit.SECONDS);
                result = "connected: " + (c.isUsable() ? "usable" : "unusable")
                        + (t.cachedPeer(peer) == c ? ", cached" : ", not cached");
            } catch (java.util.concurrent.ExecutionException e) {
                result = "failed: " + e.getCause();
            }
            connectDuringReplacementOutcome = result + "/instances: +" + (t.generation() - before) + ", "
                    + t.liveInstances() + " live";
        }
        return connectDuringReplacementOutcome;
    }

    @Test
    @Order(10)
    void anExecutorKilledWhileItsBlocksAreFetchedCostsAFetchFailureAndAStageRetryNotAHang() throws Exception {
        JavaSparkContext sc = JavaSparkContext.fromSparkContext(spark.sparkContext());
        List<Tuple2<String, Long>> executors = ExecutorProbe.onEach(spark.sparkContext(),
                () -> List.of(new Tuple2<>(org.apache.spark.SparkEnv.get().executorId(), ProcessHandle.current().pid())));
        assertTrue(executors.size() >= 2, "need two executors: " + executors);
        String victimId = executors.get(executors.size() - 1)._1();
        long victim = executors.get(executors.size() - 1)._2();
        String survivorId = executors.get(0)._1();
        int removedBefore = METRICS.executorsRemoved.get();
        JavaPairRDD<Integer, Long> summed = sc.parallelize(IntStream.range(0, 400_000).boxed().toList(), 8)
                .mapToPair(i -> new Tuple2<>(i % 100, (long) i)).reduceByKey(Long::sum, 8);
        Clusters.awaitListeners(spark);
        int victimsBefore = METRICS.mapTasksOn.computeIfAbsent(victimId, k -> new AtomicInteger()).get();
        assertEquals(100, summed.count()); // the map outputs now live on both executors
        Clusters.awaitListeners(spark);
        assertTrue(METRICS.mapTasksOn.get(victimId).get() > victimsBefore,
                "the victim holds some of this shuffle's map output: " + METRICS.mapTasksOn);
        int mapTasksBefore = METRICS.mapTasks.get();
        int failuresBefore = METRICS.fetchFailures.get();
        int retriesBefore = METRICS.stageRetries.get();
        long lostBefore = lostWithRequestsOn(survivorId);
        int startedBefore = METRICS.tasksStartedOn.computeIfAbsent(survivorId, k -> new AtomicInteger()).get();
        // the victim stops (SIGSTOP) before the shuffle's next read, so the survivor's reducers ask it for blocks
        // that do not come; it is killed while they wait: their requests, in flight over ucx4j, must fail
        signal("STOP", victim);
        java.util.concurrent.CompletableFuture<List<Tuple2<Integer, Long>>> job =
                new java.util.concurrent.CompletableFuture<>();
        try {
            try {
                Thread.ofPlatform().name("kill-test-job").start(() -> {
                    sc.setJobGroup("kill-test", "reads a shuffle whose map output a killed executor held", true);
                    try {
                        job.complete(summed.collect());
                    } catch (Throwable t) {
                        job.completeExceptionally(t);
                    }
                });
                Data.eventually(() -> METRICS.tasksStartedOn.get(survivorId).get() > startedBefore);
                Thread.sleep(1000); // the reduce task asks for its blocks as it starts
            } finally {
                ProcessHandle.of(victim).ifPresent(h -> {
                    h.destroyForcibly(); // SIGKILL ends a stopped process too
                    h.onExit().orTimeout(30, java.util.concurrent.TimeUnit.SECONDS).join();
                });
            }
            List<Tuple2<Integer, Long>> sums = job.get(3, java.util.concurrent.TimeUnit.MINUTES);
            long total = sums.stream().mapToLong(Tuple2::_2).sum();
            assertEquals(100, sums.size());
            assertEquals(400_000L * 399_999 / 2, total, "results lost in the retry");
        } finally {
            if (!job.isDone()) { // failed on the way: the job must not run on into the next test
                sc.cancelJobGroup("kill-test");
            }
        }
        Data.eventually(() -> METRICS.executorsRemoved.get() > removedBefore);
        Clusters.awaitListeners(spark);
        // the survivor's connection to the victim failed with its requests in flight; Spark saw a fetch fail (after
        // the client's retries) and retried the stage, recomputing the dead executor's map output, rather than the
        // job hanging or returning a partial result
        assertTrue(lostWithRequestsOn(survivorId) > lostBefore,
                "the survivor's requests in flight to the killed executor did not fail with their connection");
        assertTrue(METRICS.fetchFailures.get() > failuresBefore, "no fetch failure reached Spark");
        assertTrue(METRICS.stageRetries.get() > retriesBefore, "no stage was retried");
        assertTrue(METRICS.mapTasks.get() > mapTasksBefore, "no map output was recomputed after the kill");
    }

    /** {@link PeerConnection#lostWithRequestsInFlight()} in executor {@code executorId}'s JVM. */
    private static long lostWithRequestsOn(String executorId) {
        return ExecutorProbe.onEach(spark.sparkContext(), () -> List.of(new Tuple2<>(
                        org.apache.spark.SparkEnv.get().executorId(), PeerConnection.lostWithRequestsInFlight())))
                .stream().filter(t -> t._1().equals(executorId)).mapToLong(Tuple2::_2).findFirst()
                .orElseThrow(() -> new AssertionError("executor " + executorId + " did not answer"));
    }

    /** Sends {@code signal} (a name such as STOP) to process {@code pid} with the system's kill command. */
    private static void signal(String signal, long pid) throws Exception {
        Process kill = new ProcessBuilder("kill", "-" + signal, Long.toString(pid)).inheritIO().start();
        assertTrue(kill.waitFor(30, java.util.concurrent.TimeUnit.SECONDS) && kill.exitValue() == 0,
                "kill -" + signal + " " + pid + " failed");
    }

    static List<byte[]> records(int partition, int n, int size) {
        Random r = new Random(partition);
        List<byte[]> out = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            byte[] b = new byte[size];
            r.nextBytes(b);
            out.add(b);
        }
        return out;
    }

    static long crc(byte[] b) {
        CRC32 c = new CRC32();
        c.update(b);
        return c.getValue();
    }

    /** Totals from Spark's own task metrics, as the UI shows them. */
    static final class Metrics extends SparkListener {
        final AtomicLong remoteBytes = new AtomicLong();
        final AtomicLong remoteBlocks = new AtomicLong();
        final AtomicLong remoteBytesToDisk = new AtomicLong();
        final AtomicLong fetchWaitMs = new AtomicLong();
        final AtomicInteger fetchFailures = new AtomicInteger();
        final List<String> fetchFailureMessages = new java.util.concurrent.CopyOnWriteArrayList<>();
        final AtomicInteger executorsRemoved = new AtomicInteger();
        /** Stage attempts after a stage's first: each one a recomputation (a map stage re-run after lost output). */
        final AtomicInteger stageRetries = new AtomicInteger();
        /** Shuffle map tasks that succeeded, in all and by executor id. */
        final AtomicInteger mapTasks = new AtomicInteger();
        final Map<String, AtomicInteger> mapTasksOn = new java.util.concurrent.ConcurrentHashMap<>();
        /** Tasks started, by executor id. */
        final Map<String, AtomicInteger> tasksStartedOn = new java.util.concurrent.ConcurrentHashMap<>();

        @Override
        public void onTaskStart(org.apache.spark.scheduler.SparkListenerTaskStart start) {
            tasksStartedOn.computeIfAbsent(start.taskInfo().executorId(), k -> new AtomicInteger()).incrementAndGet();
        }

        @Override
        public void onStageSubmitted(SparkListenerStageSubmitted s) {
            if (s.stageInfo().attemptNumber() > 0) {
                stageRetries.incrementAndGet();
            }
        }

        @Override
        public void onTaskEnd(SparkListenerTaskEnd end) {
            if ("ShuffleMapTask".equals(end.taskType()) && end.reason() instanceof org.apache.spark.Success$) {
                mapTasks.incrementAndGet();
                mapTasksOn.computeIfAbsent(end.taskInfo().executorId(), k -> new AtomicInteger()).incrementAndGet();
            }
            if (end.reason() instanceof FetchFailed f) {
                fetchFailures.incrementAndGet();
                fetchFailureMessages.add(String.valueOf(f.message()));
            }
            if (end.taskMetrics() != null) {
                ShuffleReadMetrics r = end.taskMetrics().shuffleReadMetrics();
                remoteBytes.addAndGet(r.remoteBytesRead());
                remoteBlocks.addAndGet(r.remoteBlocksFetched());
                remoteBytesToDisk.addAndGet(r.remoteBytesReadToDisk());
                fetchWaitMs.addAndGet(r.fetchWaitTime());
            }
        }

        @Override
        public void onExecutorRemoved(SparkListenerExecutorRemoved removed) {
            executorsRemoved.incrementAndGet();
        }
    }
}
