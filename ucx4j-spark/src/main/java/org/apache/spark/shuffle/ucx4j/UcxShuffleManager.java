package org.apache.spark.shuffle.ucx4j;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.SparkConf;
import org.apache.spark.SparkEnv;
import org.apache.spark.TaskContext;
import org.apache.spark.shuffle.BaseShuffleHandle;
import org.apache.spark.shuffle.ShuffleHandle;
import org.apache.spark.shuffle.ShuffleReadMetricsReporter;
import org.apache.spark.shuffle.ShuffleReader;
import org.apache.spark.shuffle.ShuffleWriteMetricsReporter;
import org.apache.spark.shuffle.ShuffleWriter;
import org.apache.spark.shuffle.sort.SortShuffleManager;
import org.apache.spark.shuffle.sort.SortShuffleManager$;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Spark's sort shuffle with ucx4j as the network: map output is written exactly as
 * {@code spark.shuffle.manager=sort} writes it, and reducers fetch remote blocks over UCX (shared memory, TCP,
 * InfiniBand/RoCE — whatever UCX picks) instead of Netty. Enable with
 * {@code spark.shuffle.manager=org.apache.spark.shuffle.ucx4j.UcxShuffleManager}.
 *
 * <p>Each executor opens its ucx4j transport (block server + connections) on first shuffle use and registers the
 * server's address with the driver, where reducers look it up. With {@code spark.authenticate} the application
 * secret authenticates every ucx4j connection. Where ucx4j cannot run (no UCX, or
 * {@code spark.network.crypto.enabled}: UCX does not encrypt), the application fails at start with the reason,
 * unless {@code spark.ucx4j.fallback=true} asks for Spark's built-in shuffle instead.
 */
public final class UcxShuffleManager extends SortShuffleManager {
    private static final Logger LOG = LoggerFactory.getLogger(UcxShuffleManager.class);
    private static volatile UcxShuffleManager current;

    private final UcxShuffleConf conf;
    private final boolean enabled;
    /** Held by a start (and a registration with the driver): a lock a killed task's interrupt ends the wait for. */
    final java.util.concurrent.locks.ReentrantLock startLock = new java.util.concurrent.locks.ReentrantLock();
    private volatile UcxShuffleTransport transport;
    private volatile boolean stopped;

    public UcxShuffleManager(SparkConf sparkConf, boolean isDriver) {
        this(sparkConf, isDriver, org.ucx4j.Ucx.isAvailable());
    }

    /**
     * {@code ucxAvailable}: whether this JVM has UCX. The settings' reasons to refuse (network encryption, the
     * external shuffle service) hold in every JVM alike; a missing UCX is this host's own, so it decides only for
     * a JVM that moves shuffle data (an executor, or a driver that runs tasks). An executor that falls back for it
     * registers as served by Spark's own transfer service, and reducers that use ucx4j fetch its blocks that way.
     */
    UcxShuffleManager(SparkConf sparkConf, boolean isDriver, boolean ucxAvailable) {
        super(sparkConf);
        this.conf = new UcxShuffleConf(sparkConf);
        conf.validate(); // a bad setting is the user's to fix: no fallback hides it
        String settings = conf.settingsRefusal();
        String refusal = refusal(conf, isDriver, ucxAvailable);
        if (refusal != null && !conf.fallback()) {
            throw new IllegalStateException("ucx4j shuffle: " + refusal + ". Set " + UcxShuffleConf.FALLBACK
                    + "=true to use Spark's built-in shuffle instead.");
        }
        if (refusal != null) {
            LOG.warn("ucx4j shuffle: {}; using Spark's built-in shuffle ({}=true)", refusal, UcxShuffleConf.FALLBACK);
        }
        this.enabled = refusal == null;
        this.servedByNetty = settings == null && refusal != null; // this JVM alone lacks UCX
        if (settings == null && isDriver) {
            SparkEnv env = SparkEnv.get();
            env.rpcEnv().setupEndpoint(UcxDriverEndpoint.NAME, new UcxDriverEndpoint(env.rpcEnv()));
        }
        current = this;
    }

    /** Why this JVM must not use ucx4j for the shuffle, or null (see the constructor). */
    static String refusal(UcxShuffleConf conf, boolean isDriver, boolean ucxAvailable) {
        String settings = conf.settingsRefusal();
        boolean movesData = !isDriver || conf.driverRunsTasks();
        return settings != null ? settings : movesData ? UcxShuffleConf.ucxRefusal(ucxAvailable) : null;
    }

    /** This executor fell back alone (no UCX here) while others use ucx4j: reducers are told to use Netty for it. */
    private final boolean servedByNetty;
    private volatile boolean nettyRegistered;

    /** Whether ucx4j carries this application's shuffle (false after a fallback). */
    public boolean isEnabled() {
        return enabled;
    }

    @Override
    public <K, V> ShuffleWriter<K, V> getWriter(ShuffleHandle handle, long mapId, TaskContext context,
            ShuffleWriteMetricsReporter metrics) {
        // this executor's blocks must be servable before any reducer learns where they are
        if (startedTransport() == null && (servedByNetty || startFailed) && !nettyRegistered) {
            registerServedByNetty();
        }
        return super.getWriter(handle, mapId, context, metrics);
    }

    @Override
    public <K, C> ShuffleReader<K, C> getReader(ShuffleHandle handle, int startMapIndex, int endMapIndex,
            int startPartition, int endPartition, TaskContext context, ShuffleReadMetricsReporter metrics) {
        BaseShuffleHandle<K, ?, C> h = (BaseShuffleHandle<K, ?, C>) handle;
        UcxShuffleTransport t = h.dependency().isShuffleMergeFinalizedMarked() ? null : startedTransport();
        if (t == null) { // off here, or push-merged shuffle blocks (they live at the external shuffle service)
            return super.getReader(handle, startMapIndex, endMapIndex, startPartition, endPartition, context,
                    metrics); // Spark's own client: every executor's block service serves every block
        }
        var blocks = SparkEnv.get().mapOutputTracker().getMapSizesByExecutorId(handle.shuffleId(), startMapIndex,
                endMapIndex, startPartition, endPartition);
        boolean batch = SortShuffleManager$.MODULE$.canUseBatchFetch(startPartition, endPartition, context);
        return new UcxShuffleReader<>(h, blocks, context, metrics, t.client(), batch);
    }

    /** Tells the driver that this executor's blocks are fetched with Spark's own client (see servedByNetty). */
    private void registerServedByNetty() {
        lockStart();
        try {
            if (nettyRegistered) {
                return;
            }
            SparkEnv env = SparkEnv.get();
            UcxDriverEndpoint.Address me = UcxDriverEndpoint.Address.servedByNetty(env.executorId(),
                    env.blockManager().blockManagerId().host());
            org.apache.spark.util.RpcUtils.makeDriverRef(UcxDriverEndpoint.NAME, env.conf(), env.rpcEnv())
                    .askSync(new UcxDriverEndpoint.Register(me), scala.reflect.ClassTag$.MODULE$.apply(Boolean.class));
            nettyRegistered = true;
        } finally {
            startLock.unlock();
        }
    }

    /**
     * Waits for a start under way in another task (which may wait up to Spark's RPC timeout for the driver); a
     * task killed meanwhile ends its wait, its interrupt status kept.
     */
    private void lockStart() {
        try {
            startLock.lockInterruptibly();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("ucx4j shuffle: interrupted while waiting for this executor's ucx4j "
                    + "transport to start", e);
        }
    }

    /**
     * This executor's transport, started on first use; null where ucx4j is off here: a fallback decided at start,
     * or, with {@code spark.ucx4j.fallback=true}, a start that failed (UCX refused to open, the port range taken):
     * then this executor registers as served by Spark's own transfer service and reads with Spark's client. Without
     * the fallback such a failure fails the task, and the next task tries again; so does, with or without it, a
     * registration the driver did not take (a timeout, the task killed meanwhile).
     */
    private UcxShuffleTransport startedTransport() {
        UcxShuffleTransport t = transport;
        if (t != null || !enabled || startFailed) {
            return t;
        }
        lockStart();
        try {
            if (stopped) {
                throw new IllegalStateException("ucx4j shuffle manager stopped");
            }
            if (transport == null && !startFailed) {
                try {
                    transport = new UcxShuffleTransport(conf, SparkEnv.get(), shuffleBlockResolver());
                } catch (Exception e) {
                    // the fallback is for UCX failing here; the driver not answering or the task being killed fails
                    // this task only, and the next one tries again
                    if (!conf.fallback() || e instanceof UcxShuffleTransport.RegistrationException) {
                        throw e;
                    }
                    LOG.warn("ucx4j shuffle: this executor could not start ucx4j ({}); its shuffle uses Spark's "
                            + "built-in transfer service ({}=true)", e.toString(), UcxShuffleConf.FALLBACK);
                    startFailed = true;
                }
                UcxShuffleTransport started = transport;
                if (stopped && started != null) { // stop() came meanwhile: it does not wait for a start (see stop)
                    transport = null;
                    started.close();
                    throw new IllegalStateException("ucx4j shuffle manager stopped");
                }
            }
            return transport;
        } finally {
            startLock.unlock();
        }
    }

    /** The transport could not start here and {@code spark.ucx4j.fallback} asked for Spark's own instead. */
    private volatile boolean startFailed;

    /**
     * Closes this executor's transport. It does not wait for a start under way (which may be waiting for the
     * driver's answer to its registration, up to Spark's RPC timeout): that start sees {@code stopped} once it
     * has its transport, and closes it. Closing twice is harmless.
     */
    @Override
    public void stop() {
        stopped = true;
        UcxShuffleTransport t = transport;
        if (t != null) {
            t.close();
        }
        super.stop();
    }

    /** Where this JVM's executor serves shuffle blocks over ucx4j ({@code host:port}), or null if it does not. */
    public static String localServerAddress() {
        UcxShuffleManager m = current;
        UcxShuffleTransport t = m == null ? null : m.transport;
        return t == null ? null : t.address().host() + ":" + t.address().port();
    }

    /** This JVM's ucx4j transport, or null where it has not started (tests). */
    static UcxShuffleTransport localTransport() {
        UcxShuffleManager m = current;
        return m == null ? null : m.transport;
    }

    /** This JVM's ucx4j transport, started now if it has not (an executor that has run no shuffle task yet). */
    static UcxShuffleTransport startLocalTransport() {
        UcxShuffleManager m = current;
        return m == null ? null : m.startedTransport();
    }

    /** Every executor's {@link #localTraffic()}, gathered from the driver with one short job. */
    public static List<PeerTraffic> clusterTraffic(org.apache.spark.SparkContext sc) {
        return ExecutorProbe.onEach(sc, UcxShuffleManager::localTraffic);
    }

    /**
     * Traffic between this executor and its peers so far (empty where this JVM's shuffle manager is not ucx4j's or
     * its transport has not started). Run it inside a task to learn an executor's view.
     */
    public static List<PeerTraffic> localTraffic() {
        UcxShuffleManager m = current;
        UcxShuffleTransport t = m == null ? null : m.transport;
        return t == null ? List.of() : new ArrayList<>(t.traffic());
    }
}
