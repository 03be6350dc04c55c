package org.apache.spark.shuffle.ucx4j;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.spark.SparkEnv;
import org.apache.spark.network.netty.SparkTransportConf;
import org.apache.spark.network.util.TransportConf;
import org.apache.spark.rpc.RpcEndpointRef;
import org.apache.spark.shuffle.ShuffleBlockResolver;
import org.apache.spark.util.RpcUtils;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.ucx4j.Endpoint;
import org.ucx4j.Listener;
import org.ucx4j.Ucx;
import org.ucx4j.UcxOptions;

import scala.Option;
import scala.reflect.ClassTag$;

/**
 * One executor's side of the ucx4j shuffle: a {@link Ucx} instance, the {@link BlockServer} listening for
 * reducers (its address registered with the driver), and the reducer-side connections to other executors, one per
 * peer, made on first use and dropped when they fail.
 */
final class UcxShuffleTransport implements AutoCloseable {
    private static final Logger LOG = LoggerFactory.getLogger(UcxShuffleTransport.class);

    private final UcxShuffleConf conf;
    private final String executorId;
    private final Ucx ucx;
    private final BlockServer server;
    private final Listener listener;
    private final RpcEndpointRef driver;
    private final Map<String, UcxDriverEndpoint.Address> addresses = new ConcurrentHashMap<>();
    private final Map<String, CompletableFuture<PeerConnection>> peers = new ConcurrentHashMap<>();
    private final AtomicLong requestIds = new AtomicLong();
    /** Traffic of connections that have closed, newest last, at most {@link #MAX_RETIRED}. */
    private final java.util.concurrent.ConcurrentLinkedDeque<PeerTraffic> retired =
            new java.util.concurrent.ConcurrentLinkedDeque<>();
    static final int MAX_RETIRED = 256;
    private final UcxBlockClient client;
    private final TransportConf transportConf;

    UcxShuffleTransport(UcxShuffleConf conf, SparkEnv env, ShuffleBlockResolver resolver) {
        this.conf = conf;
        this.executorId = env.executorId();
        this.transportConf = SparkTransportConf.fromSparkConf(env.conf(), "shuffle", 0, Option.empty(),
                Option.empty()); // for Spark's download files
        UcxOptions options = conf.ucxOptions().withName("spark-executor-" + executorId);
        if (env.securityManager().isAuthenticationEnabled()) {
            options = options.withSecret(env.securityManager().getSecretKey().getBytes(StandardCharsets.UTF_8));
        }
        this.ucx = Ucx.open(options);
        try {
            this.server = new BlockServer(resolver, conf.partSize(), conf.partsInFlight());
            server.onClientClosed(ep -> retire(new PeerTraffic(executorId, ep.stats().peer(), false, ep.stats())));
            this.listener = conf.bindAddress() == null ? ucx.listen(conf.port(), server)
                    : ucx.listen(conf.bindAddress(), conf.port(), server);
            String host = env.blockManager().blockManagerId().host();
            this.driver = RpcUtils.makeDriverRef(UcxDriverEndpoint.NAME, env.conf(), env.rpcEnv());
            UcxDriverEndpoint.Address me = new UcxDriverEndpoint.Address(executorId, host, listener.port());
            driver.askSync(new UcxDriverEndpoint.Register(me), ClassTag$.MODULE$.apply(Boolean.class));
            addresses.put(executorId, me);
            this.client = new UcxBlockClient(this);
            LOG.info("ucx4j shuffle: executor {} serves blocks at {}:{} (UCX {})", executorId, host,
                    listener.port(), Ucx.version());
        } catch (RuntimeException e) {
            ucx.close();
            throw e;
        }
    }

    UcxDriverEndpoint.Address address() {
        return addresses.get(executorId);
    }

    UcxBlockClient client() {
        return client;
    }

    long nextRequestId() {
        return requestIds.incrementAndGet();
    }

    /** An open connection to the executor, if there is one already (the fetch fast path). */
    PeerConnection cachedPeer(String peerExecutorId) {
        CompletableFuture<PeerConnection> f = peers.get(peerExecutorId);
        if (f != null && f.isDone() && !f.isCompletedExceptionally()) {
            PeerConnection c = f.join();
            if (c.isUsable()) {
                return c;
            }
        }
        return null;
    }

    /** A connection to the executor's block server: looked up at the driver and connected on first use. Blocks. */
    PeerConnection peer(String peerExecutorId) {
        while (true) {
            CompletableFuture<PeerConnection> mine = new CompletableFuture<>();
            CompletableFuture<PeerConnection> f = peers.putIfAbsent(peerExecutorId, mine);
            if (f == null) {
                try {
                    UcxDriverEndpoint.Address a = address(peerExecutorId);
                    Endpoint ep = ucx.connect(a.host(), a.port(), conf.connectTimeout());
                    mine.complete(new PeerConnection(a, ep, conf.networkTimeout(), transportConf, this::forget));
                } catch (Throwable t) {
                    peers.remove(peerExecutorId, mine);
                    mine.completeExceptionally(t);
                    throw t;
                }
                f = mine;
            }
            PeerConnection c = f.join();
            if (c.isUsable()) {
                return c;
            }
            peers.remove(peerExecutorId, f);
        }
    }

    private void forget(PeerConnection c) {
        boolean[] removed = {false};
        peers.computeIfPresent(c.peer().executorId(), (id, f) -> {
            if (f.isDone() && !f.isCompletedExceptionally() && f.join() == c) {
                removed[0] = true;
                return null;
            }
            return f;
        });
        if (removed[0]) {
            retire(new PeerTraffic(executorId, c.peer().executorId(), true, c.endpoint().stats()));
        }
    }

    private void retire(PeerTraffic t) {
        retired.addLast(t);
        while (retired.size() > MAX_RETIRED) {
            retired.pollFirst();
        }
    }

    private UcxDriverEndpoint.Address address(String peerExecutorId) {
        UcxDriverEndpoint.Address a = addresses.get(peerExecutorId);
        if (a != null) {
            return a;
        }
        Object reply = driver.askSync(new UcxDriverEndpoint.Lookup(peerExecutorId),
                ClassTag$.MODULE$.apply(Object.class));
        if (!(reply instanceof UcxDriverEndpoint.Address found)) {
            throw new IllegalStateException("ucx4j shuffle: the driver knows no block server for executor "
                    + peerExecutorId);
        }
        addresses.put(peerExecutorId, found);
        return found;
    }

    /**
     * Traffic per connection to a peer executor, as seen from this one: fetches it made (reducer side) and blocks
     * it served; closed connections first (the last {@value #MAX_RETIRED}), then open ones.
     */
    List<PeerTraffic> traffic() {
        List<PeerTraffic> out = new ArrayList<>(retired);
        for (CompletableFuture<PeerConnection> f : peers.values()) {
            if (f.isDone() && !f.isCompletedExceptionally()) {
                PeerConnection c = f.join();
                out.add(new PeerTraffic(executorId, c.peer().executorId(), true, c.endpoint().stats()));
            }
        }
        for (Endpoint ep : server.clients()) {
            out.add(new PeerTraffic(executorId, ep.stats().peer(), false, ep.stats()));
        }
        return out;
    }

    @Override
    public void close() {
        for (CompletableFuture<PeerConnection> f : peers.values()) {
            f.thenAccept(PeerConnection::close);
        }
        peers.clear();
        listener.close();
        ucx.close();
    }
}
