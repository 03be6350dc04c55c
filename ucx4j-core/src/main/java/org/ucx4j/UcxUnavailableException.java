package org.ucx4j;

/** UCX cannot be used in this JVM: the library is missing or too old, or native access is disabled. The message says the remedy. */
public class UcxUnavailableException extends UcxException {
    private static final long serialVersionUID = 1L;

    public UcxUnavailableException(String message, int status) {
        super(message, status);
    }

    public UcxUnavailableException(String message, int status, Throwable cause) {
        super(message, status, cause);
    }
}
