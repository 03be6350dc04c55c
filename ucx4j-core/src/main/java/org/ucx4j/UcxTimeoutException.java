package org.ucx4j;

/** A wait ran out of time (UCS_ERR_TIMED_OUT). The operation it waited for was canceled or its endpoint aborted, so nothing is left half-done. */
public class UcxTimeoutException extends UcxException {
    private static final long serialVersionUID = 1L;

    public UcxTimeoutException(String message, int status) {
        super(message, status);
    }

    public UcxTimeoutException(String message, int status, Throwable cause) {
        super(message, status, cause);
    }
}
