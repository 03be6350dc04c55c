package org.apache.spark.shuffle.ucx4j;

import java.time.Duration;
import java.util.List;
import java.util.Map;

import org.apache.spark.SparkConf;
import org.ucx4j.ProgressMode;
import org.ucx4j.Ucx;
import org.ucx4j.UcxOptions;

import org.slf4j.LoggerFactory;

import scala.Tuple2;

/** The plug-in's settings, all under {@code spark.ucx4j.}; documented in the README. */
final class UcxShuffleConf {
    static final String PREFIX = "spark.ucx4j.";
    static final String FALLBACK = PREFIX + "fallback";
    static final String PORT = PREFIX + "port";
    static final String BIND_ADDRESS = PREFIX + "bindAddress";
    static final String CONNECT_TIMEOUT = PREFIX + "connectTimeout";
    static final String LIVENESS_TIMEOUT = PREFIX + "livenessTimeout";
    static final String PROGRESS_MODE = PREFIX + "progressMode";
    static final String PART_SIZE = PREFIX + "partSize";
    static final String PARTS_IN_FLIGHT = PREFIX + "partsInFlight";
    static final String PULL_BUDGET = PREFIX + "pullBudget";
    static final String RECEIVE_CACHE = PREFIX + "receiveCache";
    static final String SERVER_BYTES_IN_FLIGHT = PREFIX + "serverBytesInFlight";
    static final String UCX_PREFIX = PREFIX + "ucx.";
    /** Every setting under {@link #PREFIX} but UCX's own: any other key there is a typo, refused at start. */
    static final List<String> KEYS = List.of(FALLBACK, PORT, BIND_ADDRESS, CONNECT_TIMEOUT, LIVENESS_TIMEOUT,
            PROGRESS_MODE, PART_SIZE, PARTS_IN_FLIGHT, PULL_BUDGET, RECEIVE_CACHE, SERVER_BYTES_IN_FLIGHT);
    /** The largest part of a to-disk block: a part is one message, received as one {@code ByteBuffer}. */
    static final long MAX_PART_SIZE = 1L << 30;

    private final SparkConf conf;

    UcxShuffleConf(SparkConf conf) {
        this.conf = conf;
    }

    /** Use Spark's built-in shuffle, with a warning, where ucx4j cannot run (instead of failing the application). */
    boolean fallback() {
        return conf.getBoolean(FALLBACK, false);
    }

    int port() {
        return conf.getInt(PORT, 0);
    }

    /** Further ports tried after a fixed {@link #port()} that is taken: Spark's {@code spark.port.maxRetries}. */
    int portRetries() {
        return Math.max(0, conf.getInt("spark.port.maxRetries", 16));
    }

    String bindAddress() {
        return conf.get(BIND_ADDRESS, null);
    }

    /** Connecting to a peer executor; a number without a unit is seconds (see {@link #seconds}). */
    Duration connectTimeout() {
        return Duration.ofMillis(seconds(conf.get(CONNECT_TIMEOUT, "10s")));
    }

    /**
     * A peer executor whose host stops answering is gone after this long ({@link UcxOptions#withLivenessTimeout}):
     * 30 s, longer than ucx4j's 5 s so that a switch failover or a short network outage does not fail fetches and
     * re-run map stages, and well below {@code spark.network.timeout} (120 s). Rounded up to whole seconds, at
     * least 2; a number without a unit is seconds.
     */
    Duration livenessTimeout() {
        long ms = seconds(conf.get(LIVENESS_TIMEOUT, "30s"));
        return Duration.ofSeconds(Math.max(2, (ms + 999) / 1000));
    }

    /** Blocks Spark fetches to disk are streamed in parts of this size (the server's setting counts). */
    long partSize() {
        return conf.getSizeAsBytes(PART_SIZE, "8m");
    }

    /** How many parts of one to-disk request the server keeps in flight. */
    int partsInFlight() {
        return conf.getInt(PARTS_IN_FLIGHT, 4);
    }

    /**
     * Bytes of rendezvous payloads (blocks, parts) each executor pulls at once ({@link UcxOptions#withPullBudget});
     * the default lets every part of a to-disk request ({@code partsInFlight x partSize}) land at the same time.
     */
    long pullBudget() {
        return conf.getSizeAsBytes(PULL_BUDGET, String.valueOf(partsInFlight() * partSize()));
    }

    /**
     * Bytes of blocks (and parts) a block server sends to one reducer executor at once: past them it reads or maps
     * no more of that reducer's blocks until earlier sends end (one block always goes, however large). Twice the
     * pull budget by default, so the reducer always finds a server's next blocks ready when it has room to pull.
     */
    long serverBytesInFlight() {
        return conf.getSizeAsBytes(SERVER_BYTES_IN_FLIGHT, String.valueOf(2 * pullBudget()));
    }

    /**
     * Freed receive blocks an executor keeps for reuse (native memory outside the heap, counted against
     * {@code spark.executor.memoryOverhead}): 64 MiB, a quarter of ucx4j's default, so the default overhead
     * (at least 384 MiB) keeps room for the blocks in flight.
     */
    long receiveCache() {
        return conf.getSizeAsBytes(RECEIVE_CACHE, "64m");
    }

    /**
     * A request that sees no data for this long fails: Spark's own idle timeout for shuffle connections,
     * {@code spark.shuffle.io.connectionTimeout}, which defaults to {@code spark.network.timeout} (120 s). Zero
     * (no such timeout) for a value under a second, as Spark's Netty client takes it (whole seconds, 0 turning its
     * idle check off), so that no setting fails fetches here that Netty would let wait.
     */
    Duration networkTimeout() {
        long ms = seconds(conf.get(CONNECTION_TIMEOUT, conf.get("spark.network.timeout", "120s")));
        return ms < 1000 ? Duration.ZERO : Duration.ofMillis(ms);
    }

    /**
     * A network timeout in milliseconds, from a value in Spark's time syntax where a number without a unit is
     * seconds, as Spark reads its own network timeouts ({@code spark.network.timeout},
     * {@code spark.shuffle.io.connectionTimeout}), not milliseconds, as {@code getTimeAsMs} would take it.
     */
    static long seconds(String value) {
        String v = value.trim();
        return org.apache.spark.network.util.JavaUtils.timeStringAsMs(v.matches("[0-9]+") ? v + "s" : v);
    }

    /** Spark's idle timeout of shuffle connections (see {@link #networkTimeout}). */
    static final String CONNECTION_TIMEOUT = "spark.shuffle.io.connectionTimeout";

    /**
     * UCX settings the shuffle needs unless the user sets them: with peer-failure detection, UCX 1.13 has no
     * zero-copy (CMA) lane on shared memory, so blocks stream through the receiver's shared-memory FIFO; UCX's 64
     * slots (512 KiB) make sender and receiver take turns, which collapses when tasks keep both CPUs busy (fetch
     * wait 2-13x higher measured here). 256 slots of ucx4j's 32 KiB segments buffer 8 MiB (about 8.5 MiB of
     * /dev/shm per executor).
     */
    static final Map<String, String> UCX_DEFAULTS = Map.of("POSIX_FIFO_SIZE", "256");

    /** The progress thread's mode: {@code backoff}, {@code blocking} or {@code polling}. */
    ProgressMode progressMode() {
        String v = conf.get(PROGRESS_MODE, "backoff");
        for (ProgressMode m : List.of(ProgressMode.BACKOFF, ProgressMode.BLOCKING, ProgressMode.POLLING)) {
            if (m.name().equalsIgnoreCase(v.trim())) {
                return m;
            }
        }
        // (caller mode has no progress thread: nothing would serve blocks between a task's own calls)
        throw new IllegalArgumentException("backoff, blocking or polling expected");
    }

    /**
     * Checks every setting of the plug-in at once, so that a typo fails the application at start with the key and
     * the reason rather than a task later (or, with {@link #FALLBACK}, quietly turns an executor back to Spark's
     * own shuffle); also where ucx4j then does not run here, since the same settings reach every JVM. UCX's own
     * keys ({@code spark.ucx4j.ucx.*}) go to UCX where it is installed, which refuses bad values of its core (UCP)
     * settings; the others (its transports' {@code POSIX_*}, {@code TCP_*}...) it reads only as each executor opens
     * it.
     *
     * @throws IllegalArgumentException naming the first bad key, its value and what it takes
     */
    void validate() {
        for (Tuple2<String, String> kv : conf.getAllWithPrefix(PREFIX)) {
            String key = PREFIX + kv._1();
            if (!key.startsWith(UCX_PREFIX) && !KEYS.contains(key)) {
                throw new IllegalArgumentException("ucx4j shuffle: unknown setting " + key + " (known: " + KEYS
                        + ", and UCX's own under " + UCX_PREFIX + "*)");
            }
        }
        check(FALLBACK, this::fallback);
        check(PORT, () -> range(port(), 0, 65535));
        check(BIND_ADDRESS, () -> hostForm(bindAddress()));
        check(CONNECT_TIMEOUT, () -> positive(connectTimeout().toMillis()));
        check(LIVENESS_TIMEOUT, () -> UcxOptions.defaults().withLivenessTimeout(livenessTimeout()));
        check(PROGRESS_MODE, this::progressMode);
        check(PART_SIZE, () -> range(partSize(), 1, MAX_PART_SIZE));
        check(PARTS_IN_FLIGHT, () -> positive(partsInFlight()));
        check(PULL_BUDGET, () -> positive(pullBudget()));
        check(SERVER_BYTES_IN_FLIGHT, () -> positive(serverBytesInFlight()));
        check(RECEIVE_CACHE, () -> range(receiveCache(), 0, Long.MAX_VALUE));
        check(UCX_PREFIX + "*", this::ucxOptions);
        check(CONNECTION_TIMEOUT, this::networkTimeout);
        if (networkTimeout().isZero()) {
            LoggerFactory.getLogger(UcxShuffleConf.class).warn("ucx4j shuffle: {} is under a second: as with "
                    + "Spark's own shuffle client, fetches have no idle timeout (a dead peer still fails them)",
                    CONNECTION_TIMEOUT);
        }
        if (Ucx.isAvailable()) {
            for (Tuple2<String, String> kv : conf.getAllWithPrefix(UCX_PREFIX)) {
                check(UCX_PREFIX + kv._1(), () -> Ucx.config(UcxOptions.defaults().with(kv._1(), kv._2())));
            }
        }
    }

    private static final String LABEL = "[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?";
    private static final java.util.regex.Pattern HOST_NAME =
            java.util.regex.Pattern.compile(LABEL + "(\\." + LABEL + ")*");

    /** A host name or an IP address (not resolved here: the name is the executors' to resolve), or null. */
    static void hostForm(String host) {
        if (host == null) {
            return;
        }
        if (host.indexOf(':') >= 0 || host.matches("[0-9.]+")) {
            java.net.InetAddress.ofLiteral(host); // IllegalArgumentException: "Invalid IP address literal: ..."
        } else if (!HOST_NAME.matcher(host).matches()) {
            throw new IllegalArgumentException("a host name or an IP address expected");
        }
    }

    private void check(String key, Runnable read) {
        try {
            read.run();
        } catch (RuntimeException e) { // also the parse errors of SparkConf's getters
            String value = key.endsWith("*") ? "" : "=" + conf.get(key, "(default)");
            throw new IllegalArgumentException("ucx4j shuffle: bad setting " + key + value + ": " + e.getMessage(),
                    e);
        }
    }

    private static void positive(long v) {
        range(v, 1, Long.MAX_VALUE);
    }

    private static void range(long v, long min, long max) {
        if (v < min || v > max) {
            throw new IllegalArgumentException(max == Long.MAX_VALUE ? "at least " + min + " expected, got " + v
                    : min + " to " + max + " expected, got " + v);
        }
    }

    UcxOptions ucxOptions() {
        UcxOptions o = UcxOptions.defaults()
                .withProgressMode(progressMode())
                .withConnectTimeout(connectTimeout())
                .withLivenessTimeout(livenessTimeout())
                .withPullBudget(pullBudget())
                // blocks are host memory (file mappings, the receive pool): on GPU nodes UCX need not look each up
                .withHostMemoryOnly(true)
                // blocks go by rendezvous straight into the reducer's pool: an eager one would be copied twice there
                // (UCX's assembly buffer, then the pool, since fetched blocks may outlive UCX's buffers)
                .withEagerSends(false);
        for (Map.Entry<String, String> d : UCX_DEFAULTS.entrySet()) {
            if (!conf.contains(UCX_PREFIX + d.getKey()) && System.getenv("UCX_" + d.getKey()) == null) {
                o = o.with(d.getKey(), d.getValue());
            }
        }
        for (Tuple2<String, String> kv : conf.getAllWithPrefix(UCX_PREFIX)) {
            o = o.with(kv._1(), kv._2());
        }
        return o;
    }

    /** Why ucx4j must not carry this application's shuffle, or null when it can. */
    String refusal() {
        String r = settingsRefusal();
        return r != null ? r : ucxRefusal(Ucx.isAvailable());
    }

    /** Why this JVM cannot carry shuffle data over ucx4j, or null: UCX is missing here (differs from host to host). */
    static String ucxRefusal(boolean ucxAvailable) {
        return ucxAvailable ? null : "UCX is not available: " + Ucx.unavailabilityCause();
    }

    /**
     * True when this JVM runs tasks itself (a {@code local} master): only then does the driver need UCX. A
     * cluster's driver moves no shuffle data, so its own lack of UCX (a client on an edge node) must not decide for
     * executors that have it.
     */
    boolean driverRunsTasks() {
        String master = conf.get("spark.master", "");
        return master.startsWith("local") && !master.startsWith("local-cluster");
    }

    /** Why the application's settings keep ucx4j from carrying its shuffle (the same in every JVM), or null. */
    String settingsRefusal() {
        // every way Spark encrypts block transfers: AES-based RPC encryption, TLS for RPC (Spark 4), SASL encryption
        for (String key : List.of("spark.network.crypto.enabled", "spark.ssl.rpc.enabled",
                "spark.authenticate.enableSaslEncryption")) {
            if (conf.getBoolean(key, false)) {
                return key + " is on, but UCX does not encrypt: ucx4j will not carry shuffle data in the clear";
            }
        }
        if (conf.getBoolean("spark.shuffle.service.enabled", false)) {
            return "spark.shuffle.service.enabled is on: blocks of removed executors would be served by the external "
                    + "shuffle service, which ucx4j cannot reach (ucx4j serves blocks from live executors)";
        }
        return null;
    }
}
