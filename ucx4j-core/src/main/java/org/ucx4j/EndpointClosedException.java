package org.ucx4j;

/** The endpoint (or its worker) was closed locally (UCS_ERR_NOT_CONNECTED); operations on it fail at once. */
public class EndpointClosedException extends UcxException {
    private static final long serialVersionUID = 1L;

    public EndpointClosedException(String message, int status) {
        super(message, status);
    }

    public EndpointClosedException(String message, int status, Throwable cause) {
        super(message, status, cause);
    }
}
