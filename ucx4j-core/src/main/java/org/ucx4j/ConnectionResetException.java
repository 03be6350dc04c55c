package org.ucx4j;

/**
 * The peer is gone or the connection broke (UCS_ERR_CONNECTION_RESET, endpoint/link failures, endpoint timeout):
 * pending operations on that endpoint fail with this.
 */
public class ConnectionResetException extends UcxException {
    private static final long serialVersionUID = 1L;

    /**
     * Creates one with no cause.
     *
     * @param message the detail message
     * @param status the {@code ucs_status_t} value behind it (see {@link UcxException#status()})
     */
    public ConnectionResetException(String message, int status) {
        super(message, status);
    }

    /**
     * Creates one with a cause.
     *
     * @param message the detail message
     * @param status the {@code ucs_status_t} value behind it (see {@link UcxException#status()})
     * @param cause the underlying failure, or null
     */
    public ConnectionResetException(String message, int status, Throwable cause) {
        super(message, status, cause);
    }
}
