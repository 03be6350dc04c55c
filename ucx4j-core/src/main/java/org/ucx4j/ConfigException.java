package org.ucx4j;

/**
 * A configuration UCX refuses or cannot start with: an option value {@code ucp_config_modify} refuses (usually
 * UCS_ERR_NO_ELEM for an unknown key or UCS_ERR_INVALID_PARAM for a bad value), a configuration {@code ucp_init}
 * fails with (whatever status it returns), an option that can only come from the environment, or one ucx4j refuses
 * for the installed UCX version (UCS_ERR_UNSUPPORTED); also any operation UCX fails with UCS_ERR_INVALID_PARAM.
 * {@link #status()} tells which status it was.
 */
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
