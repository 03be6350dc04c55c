package org.ucx4j;

import java.util.Arrays;
import java.util.HexFormat;
import java.util.Objects;

/**
 * A UCX worker address (what {@code ucp_worker_get_address} returns): opaque bytes another process passes around
 * out of band (a file, a key-value store, MPI, an HTTP call) and gives to {@link Ucx#connect(WorkerAddress)}.
 */
public final class WorkerAddress {
    private static final int MAX = 1 << 20;
    private final byte[] bytes;

    private WorkerAddress(byte[] bytes) {
        this.bytes = bytes;
    }

    /**
     * Wraps address bytes (copied). Checked for size only: UCX parses the content when connecting, and trusts it
     * (its parser takes no length; ucx4j pads the copy it hands over with zeros), so take addresses only from peers
     * you trust, as with any UCX program.
     *
     * @param bytes the address, 1 byte to 1 MiB, e.g. another process's {@link Ucx#workerAddress()}{@code .toBytes()}
     * @return the address
     * @throws IllegalArgumentException if {@code bytes} is empty or longer than 1 MiB
     */
    public static WorkerAddress of(byte[] bytes) {
        Objects.requireNonNull(bytes, "bytes");
        if (bytes.length == 0 || bytes.length > MAX) {
            throw new IllegalArgumentException("a worker address is 1 .. " + MAX + " bytes, got " + bytes.length);
        }
        return new WorkerAddress(bytes.clone());
    }

    /**
     * Parses {@link #toHex()}. Leading and trailing whitespace is ignored.
     *
     * @param hex the address as hexadecimal digits, two per byte
     * @return the address
     * @throws IllegalArgumentException if {@code hex} is not an even number of hexadecimal digits, or the address
     *         is empty or longer than 1 MiB
     */
    public static WorkerAddress fromHex(String hex) {
        return of(HexFormat.of().parseHex(hex.trim()));
    }

    /** {@return a copy of the address bytes} */
    public byte[] toBytes() {
        return bytes.clone();
    }

    /** {@return the address bytes as lowercase hexadecimal digits, two per byte, for {@link #fromHex}} */
    public String toHex() {
        return HexFormat.of().formatHex(bytes);
    }

    int length() {
        return bytes.length;
    }

    byte[] raw() {
        return bytes;
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof WorkerAddress w && Arrays.equals(bytes, w.bytes);
    }

    @Override
    public int hashCode() {
        return Arrays.hashCode(bytes);
    }

    @Override
    public String toString() {
        return "WorkerAddress[" + bytes.length + " bytes, " + Integer.toHexString(hashCode()) + "]";
    }
}
