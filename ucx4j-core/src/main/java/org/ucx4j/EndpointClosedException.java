package org.ucx4j;

/** The endpoint (or its worker) was closed locally (UCS_ERR_NOT_CONNECTED); operations on it fail at once. */
public class EndpointClosedException extends UcxException {
    private static final long serialVersionUID = 1L;

    /**
     * Creates one with no cause.
     *
     * @param message the detail message
     * @param status the {@code ucs_status_t} value behind it (see {@link UcxException#status()})
     */
    public EndpointClosedException(String message, int status) {
        super(message, status);
    }

    /**
     * Creates one with a cause.
     *
     * @param message the detail message
     * @param status the {@code ucs_status_t} value behind it (see {@link UcxException#status()})
     * @param cause the underlying failure, or null
     */
    public EndpointClosedException(String message, int status, Throwable cause) {
        super(message, status, cause);
    }
}
