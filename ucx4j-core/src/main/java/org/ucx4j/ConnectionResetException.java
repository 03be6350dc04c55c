package org.ucx4j;

/** The peer is gone or the connection broke (UCS_ERR_CONNECTION_RESET, endpoint/link failures, endpoint timeout): pending operations on that endpoint fail with this. */
public class ConnectionResetException extends UcxException {
    private static final long serialVersionUID = 1L;

    public ConnectionResetException(String message, int status) {
        super(message, status);
    }

    public ConnectionResetException(String message, int status, Throwable cause) {
        super(message, status, cause);
    }
}
