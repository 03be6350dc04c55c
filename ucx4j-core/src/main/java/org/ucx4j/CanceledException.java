package org.ucx4j;

/** The operation was canceled (UCS_ERR_CANCELED), e.g. by closing the worker. */
public class CanceledException extends UcxException {
    private static final long serialVersionUID = 1L;

    public CanceledException(String message, int status) {
        super(message, status);
    }

    public CanceledException(String message, int status, Throwable cause) {
        super(message, status, cause);
    }
}
