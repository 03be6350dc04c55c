package org.ucx4j;

/** The received message was larger than the receive buffer (UCS_ERR_MESSAGE_TRUNCATED). */
public class MessageTruncatedException extends UcxException {
    private static final long serialVersionUID = 1L;

    public MessageTruncatedException(String message, int status) {
        super(message, status);
    }

    public MessageTruncatedException(String message, int status, Throwable cause) {
        super(message, status, cause);
    }
}
