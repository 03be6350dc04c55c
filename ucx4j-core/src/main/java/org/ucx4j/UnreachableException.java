package org.ucx4j;

/** The peer could not be reached or refused the connection (UCS_ERR_UNREACHABLE, UCS_ERR_REJECTED, ...). */
public class UnreachableException extends UcxException {
    private static final long serialVersionUID = 1L;

    /**
     * Creates one with no cause.
     *
     * @param message the detail message
     * @param status the {@code ucs_status_t} value behind it (see {@link UcxException#status()})
     */
    public UnreachableException(String message, int status) {
        super(message, status);
    }

    /**
     * Creates one with a cause.
     *
     * @param message the detail message
     * @param status the {@code ucs_status_t} value behind it (see {@link UcxException#status()})
     * @param cause the underlying failure, or null
     */
    public UnreachableException(String message, int status, Throwable cause) {
        super(message, status, cause);
    }
}
