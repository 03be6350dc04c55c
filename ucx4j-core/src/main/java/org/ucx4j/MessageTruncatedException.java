package org.ucx4j;

/** The received message was larger than the receive buffer (UCS_ERR_MESSAGE_TRUNCATED). */
public class MessageTruncatedException extends UcxException {
    private static final long serialVersionUID = 1L;

    /**
     * Creates one with no cause.
     *
     * @param message the detail message
     * @param status the {@code ucs_status_t} value behind it (see {@link UcxException#status()})
     */
    public MessageTruncatedException(String message, int status) {
        super(message, status);
    }

    /**
     * Creates one with a cause.
     *
     * @param message the detail message
     * @param status the {@code ucs_status_t} value behind it (see {@link UcxException#status()})
     * @param cause the underlying failure, or null
     */
    public MessageTruncatedException(String message, int status, Throwable cause) {
        super(message, status, cause);
    }
}
