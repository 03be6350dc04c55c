package org.ucx4j;

/** The operation was canceled (UCS_ERR_CANCELED), e.g. by closing the worker. */
public class CanceledException extends UcxException {
    private static final long serialVersionUID = 1L;

    /**
     * Creates one with no cause.
     *
     * @param message the detail message
     * @param status the {@code ucs_status_t} value behind it (see {@link UcxException#status()})
     */
    public CanceledException(String message, int status) {
        super(message, status);
    }

    /**
     * Creates one with a cause.
     *
     * @param message the detail message
     * @param status the {@code ucs_status_t} value behind it (see {@link UcxException#status()})
     * @param cause the underlying failure, or null
     */
    public CanceledException(String message, int status, Throwable cause) {
        super(message, status, cause);
    }
}
