package org.apache.spark.shuffle.ucx4j;

import java.io.Serializable;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.spark.rpc.RpcAddress;
import org.apache.spark.rpc.RpcCallContext;
import org.apache.spark.rpc.RpcEnv;
import org.apache.spark.rpc.ThreadSafeRpcEndpoint;

import scala.PartialFunction;
import scala.runtime.AbstractPartialFunction;
import scala.runtime.BoxedUnit;

/**
 * The driver's directory of executors' ucx4j block servers: an executor registers its listener's host and port when
 * its shuffle transport starts, and a reducer asks for the address of the executor whose blocks it needs. An entry
 * goes when the RPC connection it was registered over does, which is how Spark's own scheduler learns that an
 * executor is lost (a reducer then hears at once that no block server is known, instead of connecting to a dead
 * one).
 */
final class UcxDriverEndpoint implements ThreadSafeRpcEndpoint {

    static final String NAME = "ucx4j-shuffle";

    /** An executor's block server; port {@link #NETTY}: it has none, its blocks go through Spark's own client. */
    record Address(String executorId, String host, int port) implements Serializable {
        static final int NETTY = -1;

        /** An executor without UCX (fallen back alone): its blocks are fetched with Spark's block transfer service. */
        static Address servedByNetty(String executorId, String host) {
            return new Address(executorId, host, NETTY);
        }

        boolean isServedByNetty() {
            return port == NETTY;
        }
    }

    /** Executor to driver: my block server listens here. Reply: {@code Boolean.TRUE}. */
    record Register(Address address) implements Serializable {
    }

    /** Reducer to driver: where does this executor serve blocks? Reply: an {@link Address}, or {@code Boolean.FALSE}. */
    record Lookup(String executorId) implements Serializable {
    }

    private final RpcEnv rpcEnv;
    private final Map<String, Address> addresses = new ConcurrentHashMap<>();
    /** Executor id per RPC sender that registered it (Spark's RPC delivers one message at a time here). */
    private final Map<RpcAddress, String> registeredBy = new ConcurrentHashMap<>();

    UcxDriverEndpoint(RpcEnv rpcEnv) {
        this.rpcEnv = rpcEnv;
    }

    @Override
    public RpcEnv rpcEnv() {
        return rpcEnv;
    }

    @Override
    public PartialFunction<Object, BoxedUnit> receiveAndReply(RpcCallContext context) {
        return new AbstractPartialFunction<>() {
            @Override
            public boolean isDefinedAt(Object message) {
                return message instanceof Register || message instanceof Lookup;
            }

            @Override
            public <A1, B1> B1 applyOrElse(A1 message, scala.Function1<A1, B1> otherwise) {
                switch (message) {
                    case Register r -> {
                        String id = r.address().executorId();
                        addresses.put(id, r.address());
                        RpcAddress sender = context.senderAddress();
                        if (sender != null) { // null: the driver's own (local) registration
                            registeredBy.values().remove(id); // re-registered over another connection
                            registeredBy.put(sender, id);
                        }
                        context.reply(Boolean.TRUE);
                    }
                    case Lookup l -> {
                        Address a = addresses.get(l.executorId());
                        context.reply(a == null ? Boolean.FALSE : a);
                    }
                    default -> {
                        return otherwise.apply(message);
                    }
                }
                @SuppressWarnings("unchecked")
                B1 unit = (B1) BoxedUnit.UNIT;
                return unit;
            }
        };
    }

    /** The connection an executor registered over is gone (the executor is, for Spark's scheduler, lost). */
    @Override
    public void onDisconnected(RpcAddress remoteAddress) {
        String id = registeredBy.remove(remoteAddress);
        if (id != null) {
            addresses.remove(id);
        }
    }

    /** Whether an executor's block server is known (for tests). */
    boolean knows(String executorId) {
        return addresses.containsKey(executorId);
    }
}
