package org.ucx4j.testsupport;

import java.net.InetAddress;
import java.net.UnknownHostException;
import java.net.spi.InetAddressResolver;
import java.net.spi.InetAddressResolverProvider;
import java.util.stream.Stream;

/**
 * The test JVM's name resolver: the JDK's own for every name but {@link #SLOW}, which takes {@link #DELAY_MS} and then
 * is unknown (a resolver that does not answer), for tests of timeouts that must count name resolution. In a package
 * of its own: child JVMs that have the test classes on their class path and ucx4j on the module path load it too,
 * and a class in package {@code org.ucx4j} would be hidden there by the module's package.
 */
public final class SlowResolver extends InetAddressResolverProvider {
    public static final String SLOW = "slow-to-resolve.invalid";
    public static final long DELAY_MS = 3000;

    @Override
    public InetAddressResolver get(Configuration configuration) {
        InetAddressResolver builtin = configuration.builtinResolver();
        return new InetAddressResolver() {
            @Override
            public Stream<InetAddress> lookupByName(String host, LookupPolicy policy) throws UnknownHostException {
                if (SLOW.equals(host)) {
                    try {
                        Thread.sleep(DELAY_MS);
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                    }
                    throw new UnknownHostException(host);
                }
                return builtin.lookupByName(host, policy);
            }

            @Override
            public String lookupByAddress(byte[] addr) throws UnknownHostException {
                return builtin.lookupByAddress(addr);
            }
        };
    }

    @Override
    public String name() {
        return "ucx4j-test-slow-resolver";
    }
}
