package org.ucx4j;

/**
 * A wait ran out of time (UCS_ERR_TIMED_OUT). The operation it waited for was canceled or its endpoint aborted, so
 * nothing is left half-done.
 */
public class UcxTimeoutException extends UcxException {
    private static final long serialVersionUID = 1L;

    /**
     * Creates one with no cause.
     *
     * @param message the detail message
     * @param status the {@code ucs_status_t} value behind it (see {@link UcxException#status()})
     */
    public UcxTimeoutException(String message, int status) {
        super(message, status);
    }

    /**
     * Creates one with a cause.
     *
     * @param message the detail message
     * @param status the {@code ucs_status_t} value behind it (see {@link UcxException#status()})
     * @param cause the underlying failure, or null
     */
    public UcxTimeoutException(String message, int status, Throwable cause) {
        super(message, status, cause);
    }
}
