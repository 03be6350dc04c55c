package org.ucx4j;

/**
 * UCX cannot be used in this JVM: the library is missing or too old, or native access is disabled. The message says the
 * remedy.
 */
public class UcxUnavailableException extends UcxException {
    private static final long serialVersionUID = 1L;

    /**
     * Creates one with no cause.
     *
     * @param message the detail message
     * @param status the {@code ucs_status_t} value behind it (see {@link UcxException#status()})
     */
    public UcxUnavailableException(String message, int status) {
        super(message, status);
    }

    /**
     * Creates one with a cause.
     *
     * @param message the detail message
     * @param status the {@code ucs_status_t} value behind it (see {@link UcxException#status()})
     * @param cause the underlying failure, or null
     */
    public UcxUnavailableException(String message, int status, Throwable cause) {
        super(message, status, cause);
    }
}
