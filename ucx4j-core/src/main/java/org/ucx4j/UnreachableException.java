package org.ucx4j;

/** The peer could not be reached or refused the connection (UCS_ERR_UNREACHABLE, UCS_ERR_REJECTED, ...). */
public class UnreachableException extends UcxException {
    private static final long serialVersionUID = 1L;

    public UnreachableException(String message, int status) {
        super(message, status);
    }

    public UnreachableException(String message, int status, Throwable cause) {
        super(message, status, cause);
    }
}
