package org.ucx4j;

/**
 * A receiver-allocated message (active message, frames, object) was refused before anything was allocated: it is
 * over a receive cap ({@link UcxOptions#withMaxMessageBytes}, {@link UcxOptions#withMaxFrames}) or its header is
 * malformed (UCS_ERR_EXCEEDS_LIMIT). The receive that would have got it fails with this; later messages still flow.
 */
public class MessageRefusedException extends MessageDroppedException {
    private static final long serialVersionUID = 1L;

    /**
     * Creates one whose message header is not known.
     *
     * @param message the detail message
     * @param status the {@code ucs_status_t} value behind it, normally {@code UCS_ERR_EXCEEDS_LIMIT}
     */
    public MessageRefusedException(String message, int status) {
        super(message, status, null, null);
    }

    /**
     * Creates one that names the refused message by its header.
     *
     * @param message the detail message
     * @param status the {@code ucs_status_t} value behind it, normally {@code UCS_ERR_EXCEEDS_LIMIT}
     * @param header the user header of the refused active message (copied), or null when not known
     */
    public MessageRefusedException(String message, int status, byte[] header) {
        super(message, status, header, null);
    }
}
