package org.ucx4j;

import org.ucx4j.internal.ffi.Status;

/**
 * Root of ucx4j's exceptions, one subclass per family of {@code ucs_status_t}. Every exception made from a UCX
 * status carries UCX's status name in its message, e.g. {@code recv failed: UCS_ERR_CONNECTION_RESET (Connection
 * reset by remote peer)}, and so do those ucx4j raises itself for a failure that has a fitting status (a refused
 * handshake, a dropped message: {@link #status()} tells it); the few with no fitting status (status 0, such as an
 * unexpected error inside ucx4j, kept as the cause) carry the cause's text instead.
 * Unchecked, like the rest of the futures-based API.
 */
public class UcxException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    /** The {@code ucs_status_t} value, 0 when none applies. */
    private final int status;

    /**
     * Creates one with no cause.
     *
     * @param message the detail message
     * @param status the {@code ucs_status_t} value behind it (negative), or 0 when none applies
     */
    public UcxException(String message, int status) {
        super(message);
        this.status = status;
    }

    /**
     * Creates one with a cause.
     *
     * @param message the detail message
     * @param status the {@code ucs_status_t} value behind it (negative), or 0 when none applies
     * @param cause the underlying failure, or null
     */
    public UcxException(String message, int status, Throwable cause) {
        super(message, cause);
        this.status = status;
    }

    /**
     * {@return the {@code ucs_status_t} value behind this exception (negative), or 0 when ucx4j raised it itself with
     * no UCX status that fits}
     */
    public int status() {
        return status;
    }

    /** {@return UCX's symbolic status name, e.g. {@code UCS_ERR_CANCELED} ({@code UCS_OK} for status 0)} */
    public String statusName() {
        return Status.name(status);
    }

    /**
     * Maps a UCX status to the matching exception type; {@code what} says which operation failed. The message is
     * {@code what}, then UCX's status name and description.
     *
     * @param status a {@code ucs_status_t} error value (negative)
     * @param what the failed operation, e.g. {@code "recv failed"}
     * @return the exception, not thrown: the caller throws it or completes a future with it
     */
    public static UcxException of(int status, String what) {
        String msg = what + ": " + Status.describe(status);
        return switch (status) {
            case Status.ERR_CONNECTION_RESET, Status.ERR_ENDPOINT_TIMEOUT, Status.ERR_IO_ERROR ->
                    new ConnectionResetException(msg, status);
            case Status.ERR_CANCELED -> new CanceledException(msg, status);
            case Status.ERR_MESSAGE_TRUNCATED -> new MessageTruncatedException(msg, status);
            case Status.ERR_TIMED_OUT -> new UcxTimeoutException(msg, status);
            case Status.ERR_UNREACHABLE, Status.ERR_INVALID_ADDR, Status.ERR_REJECTED, Status.ERR_NO_DEVICE ->
                    new UnreachableException(msg, status);
            case Status.ERR_NOT_CONNECTED -> new EndpointClosedException(msg, status);
            case Status.ERR_INVALID_PARAM -> new ConfigException(msg, status);
            case Status.ERR_EXCEEDS_LIMIT -> new MessageRefusedException(msg, status);
            default -> {
                if (status <= Status.ERR_FIRST_LINK_FAILURE && status >= Status.ERR_LAST_ENDPOINT_FAILURE) {
                    yield new ConnectionResetException(msg, status);
                }
                yield new UcxException(msg, status);
            }
        };
    }
}
