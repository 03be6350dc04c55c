package org.ucx4j;

import org.ucx4j.internal.ffi.Status;

/**
 * Root of ucx4j's exceptions, one subclass per family of {@code ucs_status_t}. Every message carries UCX's status
 * name, e.g. {@code recv failed: UCS_ERR_CONNECTION_RESET (Connection reset by remote peer)}.
 * Unchecked, like the rest of the futures-based API.
 */
public class UcxException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    private final int status;

    public UcxException(String message, int status) {
        super(message);
        this.status = status;
    }

    public UcxException(String message, int status, Throwable cause) {
        super(message, cause);
        this.status = status;
    }

    /** The {@code ucs_status_t} value behind this exception (negative), or 0 when ucx4j raised it itself. */
    public int status() {
        return status;
    }

    /** UCX's symbolic status name, e.g. {@code UCS_ERR_CANCELED}. */
    public String statusName() {
        return Status.name(status);
    }

    /** Maps a UCX status to the matching exception type; {@code what} says which operation failed. */
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
