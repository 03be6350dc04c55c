package org.apache.spark.shuffle.ucx4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.apache.spark.rpc.RpcAddress;
import org.apache.spark.rpc.RpcCallContext;
import org.junit.jupiter.api.Test;

/** The driver's directory of block servers forgets an executor whose RPC connection went. */
class UcxDriverEndpointTest {

    private static final RpcAddress EXEC_1 = new RpcAddress("10.0.0.1", 40001);
    private static final RpcAddress EXEC_2 = new RpcAddress("10.0.0.2", 40002);

    @Test
    void anExecutorWhoseConnectionWentIsForgottenAndNoOtherIs() {
        UcxDriverEndpoint d = new UcxDriverEndpoint(null);
        UcxDriverEndpoint.Address a1 = new UcxDriverEndpoint.Address("1", "10.0.0.1", 7001);
        UcxDriverEndpoint.Address a2 = new UcxDriverEndpoint.Address("2", "10.0.0.2", 7002);
        assertEquals(Boolean.TRUE, ask(d, EXEC_1, new UcxDriverEndpoint.Register(a1)));
        assertEquals(Boolean.TRUE, ask(d, EXEC_2, new UcxDriverEndpoint.Register(a2)));
        assertEquals(a1, ask(d, EXEC_2, new UcxDriverEndpoint.Lookup("1")));

        d.onDisconnected(new RpcAddress("10.0.0.9", 1)); // someone else's connection
        assertTrue(d.knows("1"));
        d.onDisconnected(EXEC_1);
        assertFalse(d.knows("1"));
        assertEquals(Boolean.FALSE, ask(d, EXEC_2, new UcxDriverEndpoint.Lookup("1")));
        assertEquals(a2, ask(d, EXEC_2, new UcxDriverEndpoint.Lookup("2")));
    }

    @Test
    void aReRegistrationOverANewConnectionIsKeptWhenTheOldOneGoes() {
        UcxDriverEndpoint d = new UcxDriverEndpoint(null);
        UcxDriverEndpoint.Address first = new UcxDriverEndpoint.Address("1", "10.0.0.1", 7001);
        UcxDriverEndpoint.Address moved = new UcxDriverEndpoint.Address("1", "10.0.0.1", 7003);
        ask(d, EXEC_1, new UcxDriverEndpoint.Register(first));
        RpcAddress reconnected = new RpcAddress("10.0.0.1", 40009);
        ask(d, reconnected, new UcxDriverEndpoint.Register(moved));
        d.onDisconnected(EXEC_1);
        assertEquals(moved, ask(d, EXEC_2, new UcxDriverEndpoint.Lookup("1")));
        d.onDisconnected(reconnected);
        assertFalse(d.knows("1"));
    }

    @Test
    void theDriversOwnRegistrationHasNoConnectionToLose() {
        UcxDriverEndpoint d = new UcxDriverEndpoint(null);
        UcxDriverEndpoint.Address driver = new UcxDriverEndpoint.Address("driver", "10.0.0.5", 7005);
        ask(d, null, new UcxDriverEndpoint.Register(driver));
        d.onDisconnected(EXEC_1);
        assertEquals(driver, ask(d, EXEC_1, new UcxDriverEndpoint.Lookup("driver")));
    }

    private static Object ask(UcxDriverEndpoint d, RpcAddress sender, Object message) {
        Object[] reply = new Object[1];
        RpcCallContext context = new RpcCallContext() {
            @Override
            public void reply(Object response) {
                reply[0] = response;
            }

            @Override
            public void sendFailure(Throwable e) {
                throw new AssertionError(e);
            }

            @Override
            public RpcAddress senderAddress() {
                return sender;
            }
        };
        d.receiveAndReply(context).apply(message);
        return reply[0];
    }
}
