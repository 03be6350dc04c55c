package org.ucx4j;

import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;

/**
 * Settings for {@link Ucx#open(UcxOptions)}: UCX configuration (like UCX-Py's {@code ucp.init(options)}), whether
 * the environment wins over it, the progress mode and the default timeouts. Immutable; {@code with*} return copies.
 *
 * <p>ucx4j's own defaults, set as environment defaults before UCX loads (a {@code UCX_*} variable you set wins):
 * {@code UCX_POSIX_ERROR_HANDLING=y} (shared memory stays usable on endpoints with peer-failure detection) and
 * {@code UCX_KEEPALIVE_INTERVAL=1s} (a dead same-host peer is noticed within seconds) and
 * {@code UCX_ALLOC_PRIO=md:posix,md:sysv,thp,md:*,mmap,heap} ({@link Ucx#allocateMemory} takes posix shared
 * memory, which same-host peers read and write directly over those lanes). Options given here override
 * UCP-level settings; transport-level ones ({@code POSIX_*}, {@code TCP_*}) are set in the process environment when
 * a {@code Ucx} opens with them (UCX 1.13 applies them from there only), so they are process-wide.
 */
public final class UcxOptions implements Cloneable {
    private Map<String, String> ucx = Map.of();
    private boolean environmentWins;
    private ProgressMode progressMode = ProgressMode.BACKOFF;
    private Duration connectTimeout = Duration.ofSeconds(5);
    private Duration closeTimeout = Duration.ofSeconds(1);
    private Duration livenessTimeout = Duration.ofSeconds(5);
    private String name = "ucx4j";
    private byte[] secret;
    private java.util.Map<MemoryType, MemoryAllocator> allocators = java.util.Map.of();
    private int maxFrames = 256;
    private long maxMessageBytes = 1L << 31;
    private long pullBudget = 512L << 10;
    private boolean checkedMessages;
    private boolean ucxBuffers = true;
    private boolean peerErrorHandling = true;
    private boolean rma = true;
    private boolean hostMemoryOnly;
    private boolean eagerSends = true;
    private int maxHandshakes = 64;

    private UcxOptions() {}

    /** {@return the default options: each {@code with*} method names its default} */
    public static UcxOptions defaults() {
        return new UcxOptions();
    }

    private UcxOptions copy() {
        try {
            return (UcxOptions) clone();
        } catch (CloneNotSupportedException e) {
            throw new AssertionError(e);
        }
    }

    /**
     * Sets one UCX option; the key may carry the {@code UCX_} prefix or not ({@code TLS} == {@code UCX_TLS}). UCX
     * checks it when a {@link Ucx} opens with these options, not here.
     *
     * @param key the UCX option's name, such as {@code TLS} or {@code UCX_TLS} (surrounding whitespace is ignored)
     * @param value its value, written as in the {@code UCX_*} environment variable
     * @return a copy with this setting
     * @throws IllegalArgumentException if {@code key} is empty
     */
    public UcxOptions with(String key, String value) {
        Objects.requireNonNull(key, "key");
        Objects.requireNonNull(value, "value");
        Map<String, String> m = new LinkedHashMap<>(ucx);
        m.put(normalize(key), value);
        UcxOptions o = copy();
        o.ucx = java.util.Collections.unmodifiableMap(m);
        return o;
    }

    /**
     * Sets several UCX options at once, each as by {@link #with(String, String)}, in the map's iteration order.
     *
     * @param options UCX option names (with or without the {@code UCX_} prefix) and their values
     * @return a copy with these settings
     */
    public UcxOptions with(Map<String, String> options) {
        UcxOptions o = this;
        for (Map.Entry<String, String> e : options.entrySet()) {
            o = o.with(e.getKey(), e.getValue());
        }
        return o;
    }

    /**
     * When true, a {@code UCX_*} environment variable overrides the same option given here (default false).
     *
     * @param wins whether the environment wins over the options given here
     * @return a copy with this setting
     */
    public UcxOptions withEnvironmentWins(boolean wins) {
        UcxOptions o = copy();
        o.environmentWins = wins;
        return o;
    }

    /**
     * How the thread that owns the worker waits when there is nothing to do (default {@link ProgressMode#BACKOFF});
     * with {@link ProgressMode#CALLER} there is no progress thread.
     *
     * @param mode the progress mode
     * @return a copy with this setting
     */
    public UcxOptions withProgressMode(ProgressMode mode) {
        UcxOptions o = copy();
        o.progressMode = Objects.requireNonNull(mode, "mode");
        return o;
    }

    /**
     * Default timeout of {@link Ucx#connect(String, int)} (and of {@link Ucx#connectAsync(String, int)} and
     * {@link Ucx#connect(WorkerAddress)}) and of an incoming handshake (5 s).
     *
     * @param timeout the timeout, positive
     * @return a copy with this setting
     * @throws IllegalArgumentException if {@code timeout} is zero or negative
     */
    public UcxOptions withConnectTimeout(Duration timeout) {
        UcxOptions o = copy();
        o.connectTimeout = positive(timeout, "connectTimeout");
        return o;
    }

    /**
     * How long a graceful {@link Endpoint#close()} may flush before it aborts (1 s).
     *
     * @param timeout the timeout, positive
     * @return a copy with this setting
     * @throws IllegalArgumentException if {@code timeout} is zero or negative
     */
    public UcxOptions withCloseTimeout(Duration timeout) {
        UcxOptions o = copy();
        o.closeTimeout = positive(timeout, "closeTimeout");
        return o;
    }

    /**
     * How long the host of a connection's peer may stay silent before the connection fails (5 s): once the
     * connection's socket is idle, the kernel probes it (TCP keepalive), and a peer whose machine is gone, or cut off
     * by the network, stops answering; its endpoint's pending and later operations then fail with
     * {@link ConnectionResetException}. A busy, paused or collecting peer process still answers (its kernel does),
     * and a peer process that dies closes the socket at once. UCX's own keepalive does not cover this over TCP: UCX
     * (1.13 to 1.20) notices such a peer only when TCP gives up retransmitting (about 15 minutes with Linux's
     * defaults). Whole seconds, from 2 s to one day; where the JDK cannot set the probe timing ({@code jdk.net}'s
     * {@code TCP_KEEPIDLE} unsupported) the system's keepalive settings apply. Raw endpoints
     * ({@link Ucx#connect(WorkerAddress)}) have no socket and rely on UCX alone.
     *
     * @param timeout the timeout: whole seconds, from 2 s to one day
     * @return a copy with this setting
     * @throws IllegalArgumentException if {@code timeout} is not whole seconds from 2 s to one day
     */
    public UcxOptions withLivenessTimeout(Duration timeout) {
        positive(timeout, "livenessTimeout");
        if (timeout.compareTo(Duration.ofSeconds(2)) < 0 || timeout.compareTo(Duration.ofDays(1)) > 0
                || timeout.getNano() != 0) {
            throw new IllegalArgumentException("livenessTimeout must be whole seconds from 2 s to 1 day, got "
                    + timeout);
        }
        UcxOptions o = copy();
        o.livenessTimeout = timeout;
        return o;
    }

    /**
     * A name for the worker and its progress thread (logs, {@code info}).
     *
     * @param name the name (default {@code ucx4j}); each {@link Ucx} opened with it appends {@code -} and a number
     * @return a copy with this setting
     */
    public UcxOptions withName(String name) {
        UcxOptions o = copy();
        o.name = Objects.requireNonNull(name, "name");
        return o;
    }

    /**
     * A shared secret both sides of every connection must prove (HMAC-SHA256 challenge/response in the handshake,
     * the secret itself never crosses the wire). A peer without it is rejected before any UCX endpoint exists and
     * no connection handler sees it. UCX does not encrypt the traffic that follows.
     *
     * @param secret the secret, at least one byte (copied; default: none)
     * @return a copy with this setting
     * @throws IllegalArgumentException if {@code secret} is empty
     */
    public UcxOptions withSecret(byte[] secret) {
        Objects.requireNonNull(secret, "secret");
        if (secret.length == 0) {
            throw new IllegalArgumentException("empty secret");
        }
        UcxOptions o = copy();
        o.secret = secret.clone();
        return o;
    }

    /**
     * The allocator receiver-allocated messages of {@code type} land in (active messages, frames, objects). Host
     * memory defaults to a {@link PooledAllocator} per {@link Ucx} instance (256 MiB cache); other memory types are
     * slots for device allocators (CUDA comes later). With a {@code PooledAllocator} (the default or one given here),
     * eager payloads above 32 KiB + 64 B that UCX assembled from fragments are kept in UCX's buffer instead (see
     * {@link #withUcxBuffers}); any other allocator gets every payload.
     *
     * @param type the memory type
     * @param allocator the allocator for it
     * @return a copy with this setting
     */
    public UcxOptions withAllocator(MemoryType type, MemoryAllocator allocator) {
        Objects.requireNonNull(type, "type");
        Objects.requireNonNull(allocator, "allocator");
        java.util.Map<MemoryType, MemoryAllocator> m = new java.util.EnumMap<>(MemoryType.class);
        m.putAll(allocators);
        m.put(type, allocator);
        UcxOptions o = copy();
        o.allocators = java.util.Collections.unmodifiableMap(m);
        return o;
    }

    /**
     * {@return the allocator registered for {@code type}, or null (for host memory: ucx4j's pooled default)}
     *
     * @param type the memory type
     */
    public MemoryAllocator allocator(MemoryType type) {
        return allocators.get(type);
    }

    /**
     * Most frames one {@link Endpoint#recvFrames()} message may carry (default 256); a peer's header claiming more
     * is refused before anything is allocated. The sender checks its own cap too.
     *
     * @param maxFrames the most frames in one message, zero or more
     * @return a copy with this setting
     * @throws IllegalArgumentException if {@code maxFrames} is negative
     */
    public UcxOptions withMaxFrames(int maxFrames) {
        if (maxFrames < 0) {
            throw new IllegalArgumentException("negative maxFrames: " + maxFrames);
        }
        UcxOptions o = copy();
        o.maxFrames = maxFrames;
        return o;
    }

    /** {@return the most frames one received message may carry} See {@link #withMaxFrames}. */
    public int maxFrames() {
        return maxFrames;
    }

    /**
     * Largest receiver-allocated message (active message payload, all frames together, object) this side accepts
     * (default 2 GiB); checked against the sender's header before anything is allocated.
     *
     * @param maxBytes the largest such message in bytes, zero or more
     * @return a copy with this setting
     * @throws IllegalArgumentException if {@code maxBytes} is negative
     */
    public UcxOptions withMaxMessageBytes(long maxBytes) {
        if (maxBytes < 0) {
            throw new IllegalArgumentException("negative maxMessageBytes: " + maxBytes);
        }
        UcxOptions o = copy();
        o.maxMessageBytes = maxBytes;
        return o;
    }

    /**
     * {@return the largest receiver-allocated message this side accepts, in bytes} See {@link #withMaxMessageBytes}.
     */
    public long maxMessageBytes() {
        return maxMessageBytes;
    }

    /**
     * How many bytes of rendezvous (large) active-message payloads, frames and objects the worker pulls at once
     * (default 512 KiB; two pulls always run, whatever their sizes, so every message is double-buffered). Later
     * arrivals wait, announced but unpulled (UCX holds them, the sender's send stays pending), and are pulled
     * oldest first as earlier pulls land, each into memory allocated as it starts: in-flight receive memory stays
     * bounded (unbounded, 32 outstanding 4 MiB messages took 32 blocks at once), and a consumer that frees promptly
     * gets the same few blocks back, still in the CPU's cache (with 4 MiB, thirty-two 64 KiB messages in flight
     * rotated through 2 MiB of blocks, as much as a core's L2 cache here, and were received ~10 % slower). Past the
     * budget, an endpoint with no pull in flight still gets one, so a peer that stops progressing in the middle of
     * its pulls holds up only its own messages and raw peers' (which have no endpoint; in-flight memory: the
     * budget or two messages, whichever is more, plus at most one message per endpoint), and other peers go on one
     * pull at a time until it resumes or goes. The pulls never wait for the application (a sender blocked on a
     * large send cannot deadlock against a receiver blocked on its own). Raise it for many peers on a high-latency
     * network.
     *
     * @param bytes the budget in bytes, zero or more
     * @return a copy with this setting
     * @throws IllegalArgumentException if {@code bytes} is negative
     */
    public UcxOptions withPullBudget(long bytes) {
        if (bytes < 0) {
            throw new IllegalArgumentException("negative pullBudget: " + bytes);
        }
        UcxOptions o = copy();
        o.pullBudget = bytes;
        return o;
    }

    /** {@return how many bytes of rendezvous payloads the worker pulls at once} See {@link #withPullBudget}. */
    public long pullBudget() {
        return pullBudget;
    }

    /**
     * Bind each received message's memory ({@link AmMessage}, {@link Frames}) to its own shared arena, so that any
     * access after close fails with {@link IllegalStateException} instead of touching freed memory. Off by default:
     * closing a shared arena costs tens of microseconds. A debugging aid, like Netty's paranoid leak detection.
     *
     * @param checked whether each received message gets its own arena
     * @return a copy with this setting
     */
    public UcxOptions withCheckedMessages(boolean checked) {
        UcxOptions o = copy();
        o.checkedMessages = checked;
        return o;
    }

    /** {@return whether each received message gets its own arena} See {@link #withCheckedMessages}. */
    public boolean checkedMessages() {
        return checkedMessages;
    }

    /**
     * Whether an eager active-message payload above 32 KiB + 64 B that UCX assembled from fragments may stay in UCX's
     * own buffer instead of being copied into the allocator's memory (on by default; it applies only with a
     * {@link PooledAllocator}, and not with {@link #withCheckedMessages}). Such a payload goes back to UCX when its
     * message is closed and cannot be used once its {@link Ucx} is closed; turn this off where messages must outlive
     * the instance that received them.
     *
     * @param keep whether such payloads may stay in UCX's buffers
     * @return a copy with this setting
     */
    public UcxOptions withUcxBuffers(boolean keep) {
        UcxOptions o = copy();
        o.ucxBuffers = keep;
        return o;
    }

    /** {@return whether large eager payloads may stay in UCX's buffers, as set} See {@link #withUcxBuffers}. */
    public boolean ucxBuffers() {
        return ucxBuffers;
    }

    /**
     * UCX peer error handling ({@code UCP_ERR_HANDLING_MODE_PEER}) on every endpoint: on by default, like UCX-Py's
     * {@code endpoint_error_handling}. With it, UCX itself reports a dead peer (keepalive; on shared memory within
     * about a second). Off, UCX may pick transports that cannot report a peer failure (UCX 1.13: CMA zero-copy for
     * same-host rendezvous and RMA, which error handling rules out), and ucx4j notices a dead peer only through its
     * connection's socket: a process that dies closes it at once; a host that vanishes stops answering its probes
     * ({@link #withLivenessTimeout}, either way). Both ends of a connection must agree: the handshake refuses a
     * mismatch.
     * Raw endpoints ({@link Ucx#connect(WorkerAddress)}) have no socket: with this off they rely on the peer
     * closing properly.
     *
     * @param on whether endpoints use UCX peer error handling
     * @return a copy with this setting
     */
    public UcxOptions withPeerErrorHandling(boolean on) {
        UcxOptions o = copy();
        o.peerErrorHandling = on;
        return o;
    }

    /**
     * Whether this instance takes part in remote memory access (default on): its memory regions' keys can be packed
     * and unpacked, and {@link Endpoint#put}/{@link Endpoint#get} work. Off, UCX runs without its RMA feature, which
     * also removes UCX's software put/get handlers: where UCX emulates RMA (over TCP; on shared memory with peer
     * error handling), those write or read whatever address a request names, unchecked, and anyone who reaches
     * UCX's own transport ports can send one without ucx4j's handshake (a secret authenticates that handshake only).
     * A program that uses only messages (tags, streams, active messages) should turn it off; the Spark plug-in does.
     * Tag, stream and active-message rendezvous still go zero-copy without it.
     *
     * @param on whether RMA is enabled
     * @return a copy with this setting
     */
    public UcxOptions withRma(boolean on) {
        UcxOptions o = copy();
        o.rma = on;
        return o;
    }

    /** {@return whether remote memory access is enabled} See {@link #withRma}. */
    public boolean rma() {
        return rma;
    }

    /**
     * Promises that every buffer given to this instance is host memory (default off). Where UCX moves host memory
     * alone (a build without CUDA or ROCm, or no device found: {@link Ucx#memoryTypes()}) every call names its
     * buffers host memory anyway. Where UCX also moves GPU memory, UCX otherwise finds each buffer's memory type
     * per call, which a host-only program on a GPU machine can spare it: measured on an H100 host with UCX 1.20.1,
     * 8-byte active messages took 0.71 against 0.54 us one way, and their rate fell to a quarter, when UCX looked.
     * With this on, a GPU pointer passed to a call is read as host memory, which crashes the process.
     *
     * @param on whether every buffer is host memory
     * @return a copy with this setting
     */
    public UcxOptions withHostMemoryOnly(boolean on) {
        UcxOptions o = copy();
        o.hostMemoryOnly = on;
        return o;
    }

    /** {@return whether every buffer is promised to be host memory} See {@link #withHostMemoryOnly}. */
    public boolean hostMemoryOnly() {
        return hostMemoryOnly;
    }

    /**
     * Whether ucx4j may ask UCX for eager sends over shared memory (default on). Where every lane of an endpoint to a
     * ucx4j peer is a shared-memory FIFO and UCX runs its first protocols (1.13 to 1.15, or later with
     * {@code UCX_PROTO_ENABLE=n}), with the rendezvous threshold left to UCX, tag sends and active messages up to
     * 512 KiB then go eagerly, as UCX 1.16 and later send them there by themselves: no round trip
     * before the bytes, and an active message's payload stays in the buffer UCX assembled it in (with
     * {@link #withUcxBuffers} on). Such a send completes without waiting for the receiver; a message that arrives
     * before its receive holds the receiver's shared-memory segments until taken, and a receiver's refusal (a cap,
     * a closed endpoint) no longer reaches the sender. Off: UCX's own choice (rendezvous above one segment), as
     * does an explicit {@code RNDV_THRESH}. {@link Endpoint#info()} says where it applies.
     *
     * @param on whether sends may go eagerly
     * @return a copy with this setting
     */
    public UcxOptions withEagerSends(boolean on) {
        UcxOptions o = copy();
        o.eagerSends = on;
        return o;
    }

    /** {@return whether ucx4j may ask UCX for eager sends over shared memory} See {@link #withEagerSends}. */
    public boolean eagerSends() {
        return eagerSends;
    }

    /**
     * Most incoming connections each {@link Listener} handshakes at once (default 64). Until a peer has proven
     * itself (the secret, when one is set) its connection holds a socket and a virtual thread for up to the connect
     * timeout; past this many, a listener accepts no more until one ends, and later peers wait in the kernel's
     * accept queue (or time out there), so a flood of connections that never speak cannot use up the process's
     * file descriptors (a flood that keeps renewing itself can still keep other peers out: their connects time out;
     * the cap bounds resources, not who gets in). Connections handed over to the listener's handler do not count.
     *
     * @param max the most handshakes in progress per listener, one or more
     * @return a copy with this setting
     * @throws IllegalArgumentException if {@code max} is less than one
     */
    public UcxOptions withMaxHandshakes(int max) {
        if (max < 1) {
            throw new IllegalArgumentException("maxHandshakes must be at least 1: " + max);
        }
        UcxOptions o = copy();
        o.maxHandshakes = max;
        return o;
    }

    /** {@return the most incoming handshakes one listener runs at once} See {@link #withMaxHandshakes}. */
    public int maxHandshakes() {
        return maxHandshakes;
    }

    /** {@return whether endpoints use UCX peer error handling} See {@link #withPeerErrorHandling}. */
    public boolean peerErrorHandling() {
        return peerErrorHandling;
    }

    /** {@return the shared secret (a copy), or null} */
    public byte[] secret() {
        return secret == null ? null : secret.clone();
    }

    /**
     * {@return the UCX options set here, keys without the {@code UCX_} prefix} An unmodifiable map, in the order the
     * keys were first set; what UCX will use is {@link Ucx#config(UcxOptions)}.
     */
    public Map<String, String> ucxOptions() {
        return ucx;
    }

    /**
     * What ucx4j gives UCX: the options set here and, unless set here or in the environment:
     * <ul>
     * <li>without peer error handling, {@code PROTO_INDIRECT_ID=on}. UCX then names its endpoints on the wire by ids
     * it checks, as it does with error handling, instead of raw pointers: a rendezvous message a raw peer announced to
     * an endpoint closed since then is refused by UCX, not pulled or acknowledged through freed memory;
     * <li>with eager sends ({@link #withEagerSends}), {@link #EAGER_TAG_THRESHOLD} as {@code RNDV_SEND_NBR_THRESH}:
     * the threshold UCX's first protocols apply to tag sends that ask for fast completion, which only ucx4j's eager
     * sends do (UCX's default, 256 KiB, would send a 256 KiB tag message by rendezvous: 0.94-0.95x of
     * {@code ucx_perftest} at 256 KiB against 1.05-1.07x eagerly, two alternating pairs).
     * </ul>
     */
    Map<String, String> givenToUcx() {
        boolean indirect = !peerErrorHandling && !ucx.containsKey("PROTO_INDIRECT_ID")
                && System.getenv("UCX_PROTO_INDIRECT_ID") == null;
        boolean nbr = eagerSends && !ucx.containsKey("RNDV_SEND_NBR_THRESH")
                && System.getenv("UCX_RNDV_SEND_NBR_THRESH") == null;
        if (!indirect && !nbr) {
            return ucx;
        }
        Map<String, String> m = new java.util.LinkedHashMap<>(ucx);
        if (indirect) {
            m.put("PROTO_INDIRECT_ID", "on");
        }
        if (nbr) {
            m.put("RNDV_SEND_NBR_THRESH", EAGER_TAG_THRESHOLD);
        }
        return java.util.Collections.unmodifiableMap(m);
    }

    /**
     * UCX's rendezvous threshold for ucx4j's eager tag sends: 520 KiB, so tag messages up to 512 KiB go eagerly, as
     * active messages up to 512 KiB do ({@link #withEagerSends}).
     */
    static final String EAGER_TAG_THRESHOLD = "520k";

    /** {@return whether {@code UCX_*} environment variables override the options given here} */
    public boolean environmentWins() {
        return environmentWins;
    }

    /** {@return the progress mode} */
    public ProgressMode progressMode() {
        return progressMode;
    }

    /** {@return the default connect and handshake timeout} */
    public Duration connectTimeout() {
        return connectTimeout;
    }

    /** {@return how long a graceful {@link Endpoint#close()} may flush} */
    public Duration closeTimeout() {
        return closeTimeout;
    }

    /** {@return how long the host of a connection's peer may stay silent} See {@link #withLivenessTimeout}. */
    public Duration livenessTimeout() {
        return livenessTimeout;
    }

    /** {@return the name for the worker and its progress thread} */
    public String name() {
        return name;
    }

    static String normalize(String key) {
        String k = key.trim();
        if (k.isEmpty()) {
            throw new IllegalArgumentException("empty UCX option name");
        }
        return k.startsWith("UCX_") ? k.substring(4) : k;
    }

    static Duration positive(Duration d, String what) {
        Objects.requireNonNull(d, what);
        if (d.isNegative() || d.isZero()) {
            throw new IllegalArgumentException(what + " must be positive, got " + d);
        }
        return d;
    }
}
