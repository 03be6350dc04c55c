package org.ucx4j;

/** UCX refused a configuration value or parameter (UCS_ERR_INVALID_PARAM, UCS_ERR_NO_ELEM). */
public class ConfigException extends UcxException {
    private static final long serialVersionUID = 1L;

    public ConfigException(String message, int status) {
        super(message, status);
    }

    public ConfigException(String message, int status, Throwable cause) {
        super(message, status, cause);
    }
}
