package org.ucx4j;

/** UCX refused a configuration value or parameter (UCS_ERR_INVALID_PARAM, UCS_ERR_NO_ELEM). */
public class ConfigException extends UcxException {
    private static final long serialVersionUID = 1L;

    /**
     * Creates one with no cause.
     *
     * @param message the detail message
     * @param status the {@code ucs_status_t} value behind it (see {@link UcxException#status()})
     */
    public ConfigException(String message, int status) {
        super(message, status);
    }

    /**
     * Creates one with a cause.
     *
     * @param message the detail message
     * @param status the {@code ucs_status_t} value behind it (see {@link UcxException#status()})
     * @param cause the underlying failure, or null
     */
    public ConfigException(String message, int status, Throwable cause) {
        super(message, status, cause);
    }
}
