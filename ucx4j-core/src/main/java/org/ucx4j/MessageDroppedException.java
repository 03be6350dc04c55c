package org.ucx4j;

/**
 * One receiver-allocated message (active message, frames, object) could not be taken and was dropped: its memory
 * could not be allocated (UCS_ERR_NO_MEMORY), it was refused ({@link MessageRefusedException}), or its connection
 * went away while its payload was still on its way (UCS_ERR_CONNECTION_RESET, in place of the lost message, so that
 * the next one does not arrive as if none were missing). The receive that
 * would have got it fails with this; later messages still flow, so a receive loop may go on. {@link #header()}
 * tells which message it was. The sender is not told: a large (rendezvous) message is refused only after its send
 * was accepted, and UCX 1.13 can release such a message only with a success acknowledgement.
 */
public class MessageDroppedException extends UcxException {
    private static final long serialVersionUID = 1L;
    private static final byte[] NONE = new byte[0];

    /** The dropped message's user header, empty when there is none to report. */
    private final byte[] header;

    /**
     * Creates one for a dropped message.
     *
     * @param message the detail message
     * @param status the {@code ucs_status_t} value behind it (see {@link UcxException#status()})
     * @param header the user header of the dropped active message (copied), or null when not known
     * @param cause the underlying failure (the allocator's exception, say), or null
     */
    public MessageDroppedException(String message, int status, byte[] header, Throwable cause) {
        super(message, status, cause);
        this.header = header == null ? NONE : header.clone();
    }

    /**
     * {@return a copy of the user header of the dropped active message (empty for frames and objects, whose header
     * is ucx4j's own, and when it is not known)}
     */
    public byte[] header() {
        return header.clone();
    }
}
