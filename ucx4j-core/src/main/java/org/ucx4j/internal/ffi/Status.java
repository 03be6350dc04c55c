package org.ucx4j.internal.ffi;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/** {@code ucs_status_t} values and decoding of {@code ucs_status_ptr_t}. */
public final class Status {
    private Status() {}

    public static final int OK = 0;
    public static final int INPROGRESS = 1;
    public static final int ERR_NO_MESSAGE = -1;
    public static final int ERR_NO_RESOURCE = -2;
    public static final int ERR_IO_ERROR = -3;
    public static final int ERR_NO_MEMORY = -4;
    public static final int ERR_INVALID_PARAM = -5;
    public static final int ERR_UNREACHABLE = -6;
    public static final int ERR_INVALID_ADDR = -7;
    public static final int ERR_NOT_IMPLEMENTED = -8;
    public static final int ERR_MESSAGE_TRUNCATED = -9;
    public static final int ERR_NO_PROGRESS = -10;
    public static final int ERR_BUFFER_TOO_SMALL = -11;
    public static final int ERR_NO_ELEM = -12;
    public static final int ERR_SOME_CONNECTS_FAILED = -13;
    public static final int ERR_NO_DEVICE = -14;
    public static final int ERR_BUSY = -15;
    public static final int ERR_CANCELED = -16;
    public static final int ERR_SHMEM_SEGMENT = -17;
    public static final int ERR_ALREADY_EXISTS = -18;
    public static final int ERR_OUT_OF_RANGE = -19;
    public static final int ERR_TIMED_OUT = -20;
    public static final int ERR_EXCEEDS_LIMIT = -21;
    public static final int ERR_UNSUPPORTED = -22;
    public static final int ERR_REJECTED = -23;
    public static final int ERR_NOT_CONNECTED = -24;
    public static final int ERR_CONNECTION_RESET = -25;
    public static final int ERR_FIRST_LINK_FAILURE = -40;
    public static final int ERR_LAST_LINK_FAILURE = -59;
    public static final int ERR_FIRST_ENDPOINT_FAILURE = -60;
    public static final int ERR_ENDPOINT_TIMEOUT = -80;
    public static final int ERR_LAST_ENDPOINT_FAILURE = -89;

    /** A {@code ucs_status_ptr_t} is an error when it lies in [-(2^12-1) .. -1] cast to a pointer (UCS_PTR_IS_ERR). */
    public static boolean isError(long statusPtr) {
        return Long.compareUnsigned(statusPtr, -4096L) > 0;
    }

    /** True when a {@code ucs_status_ptr_t} is a request handle (UCS_PTR_IS_PTR). */
    public static boolean isRequest(long statusPtr) {
        return statusPtr != 0 && !isError(statusPtr);
    }

    private static final Map<Integer, String> NAMES = new ConcurrentHashMap<>();

    /**
     * UCX's symbolic name for a status ({@code UCS_ERR_CONNECTION_RESET}) followed by its text, as in
     * {@code UCS_ERR_CONNECTION_RESET (Connection reset by remote peer)}; cached, so the native call is made once.
     */
    public static String describe(int status) {
        return NAMES.computeIfAbsent(status, s -> name(s) + " (" + Ucp.statusString(s) + ")");
    }

    /** The C enum name of a status; numeric for values ucx4j does not know. */
    public static String name(int status) {
        return switch (status) {
            case OK -> "UCS_OK";
            case INPROGRESS -> "UCS_INPROGRESS";
            case ERR_NO_MESSAGE -> "UCS_ERR_NO_MESSAGE";
            case ERR_NO_RESOURCE -> "UCS_ERR_NO_RESOURCE";
            case ERR_IO_ERROR -> "UCS_ERR_IO_ERROR";
            case ERR_NO_MEMORY -> "UCS_ERR_NO_MEMORY";
            case ERR_INVALID_PARAM -> "UCS_ERR_INVALID_PARAM";
            case ERR_UNREACHABLE -> "UCS_ERR_UNREACHABLE";
            case ERR_INVALID_ADDR -> "UCS_ERR_INVALID_ADDR";
            case ERR_NOT_IMPLEMENTED -> "UCS_ERR_NOT_IMPLEMENTED";
            case ERR_MESSAGE_TRUNCATED -> "UCS_ERR_MESSAGE_TRUNCATED";
            case ERR_NO_PROGRESS -> "UCS_ERR_NO_PROGRESS";
            case ERR_BUFFER_TOO_SMALL -> "UCS_ERR_BUFFER_TOO_SMALL";
            case ERR_NO_ELEM -> "UCS_ERR_NO_ELEM";
            case ERR_SOME_CONNECTS_FAILED -> "UCS_ERR_SOME_CONNECTS_FAILED";
            case ERR_NO_DEVICE -> "UCS_ERR_NO_DEVICE";
            case ERR_BUSY -> "UCS_ERR_BUSY";
            case ERR_CANCELED -> "UCS_ERR_CANCELED";
            case ERR_SHMEM_SEGMENT -> "UCS_ERR_SHMEM_SEGMENT";
            case ERR_ALREADY_EXISTS -> "UCS_ERR_ALREADY_EXISTS";
            case ERR_OUT_OF_RANGE -> "UCS_ERR_OUT_OF_RANGE";
            case ERR_TIMED_OUT -> "UCS_ERR_TIMED_OUT";
            case ERR_EXCEEDS_LIMIT -> "UCS_ERR_EXCEEDS_LIMIT";
            case ERR_UNSUPPORTED -> "UCS_ERR_UNSUPPORTED";
            case ERR_REJECTED -> "UCS_ERR_REJECTED";
            case ERR_NOT_CONNECTED -> "UCS_ERR_NOT_CONNECTED";
            case ERR_CONNECTION_RESET -> "UCS_ERR_CONNECTION_RESET";
            case ERR_ENDPOINT_TIMEOUT -> "UCS_ERR_ENDPOINT_TIMEOUT";
            default -> {
                if (status <= ERR_FIRST_LINK_FAILURE && status >= ERR_LAST_LINK_FAILURE) {
                    yield "UCS_ERR_LINK_FAILURE(" + status + ")";
                }
                if (status <= ERR_FIRST_ENDPOINT_FAILURE && status >= ERR_LAST_ENDPOINT_FAILURE) {
                    yield "UCS_ERR_ENDPOINT_FAILURE(" + status + ")";
                }
                yield "UCS_STATUS(" + status + ")";
            }
        };
    }

    static void constants(Map<String, Long> m) {
        m.put("UCS_OK", (long) OK);
        m.put("UCS_INPROGRESS", (long) INPROGRESS);
        m.put("UCS_ERR_NO_MESSAGE", (long) ERR_NO_MESSAGE);
        m.put("UCS_ERR_NO_RESOURCE", (long) ERR_NO_RESOURCE);
        m.put("UCS_ERR_IO_ERROR", (long) ERR_IO_ERROR);
        m.put("UCS_ERR_NO_MEMORY", (long) ERR_NO_MEMORY);
        m.put("UCS_ERR_INVALID_PARAM", (long) ERR_INVALID_PARAM);
        m.put("UCS_ERR_UNREACHABLE", (long) ERR_UNREACHABLE);
        m.put("UCS_ERR_INVALID_ADDR", (long) ERR_INVALID_ADDR);
        m.put("UCS_ERR_NOT_IMPLEMENTED", (long) ERR_NOT_IMPLEMENTED);
        m.put("UCS_ERR_MESSAGE_TRUNCATED", (long) ERR_MESSAGE_TRUNCATED);
        m.put("UCS_ERR_NO_PROGRESS", (long) ERR_NO_PROGRESS);
        m.put("UCS_ERR_BUFFER_TOO_SMALL", (long) ERR_BUFFER_TOO_SMALL);
        m.put("UCS_ERR_NO_ELEM", (long) ERR_NO_ELEM);
        m.put("UCS_ERR_SOME_CONNECTS_FAILED", (long) ERR_SOME_CONNECTS_FAILED);
        m.put("UCS_ERR_SHMEM_SEGMENT", (long) ERR_SHMEM_SEGMENT);
        m.put("UCS_ERR_BUSY", (long) ERR_BUSY);
        m.put("UCS_ERR_CANCELED", (long) ERR_CANCELED);
        m.put("UCS_ERR_TIMED_OUT", (long) ERR_TIMED_OUT);
        m.put("UCS_ERR_UNSUPPORTED", (long) ERR_UNSUPPORTED);
        m.put("UCS_ERR_REJECTED", (long) ERR_REJECTED);
        m.put("UCS_ERR_NOT_CONNECTED", (long) ERR_NOT_CONNECTED);
        m.put("UCS_ERR_CONNECTION_RESET", (long) ERR_CONNECTION_RESET);
        m.put("UCS_ERR_ENDPOINT_TIMEOUT", (long) ERR_ENDPOINT_TIMEOUT);
        m.put("UCS_ERR_FIRST_LINK_FAILURE", (long) ERR_FIRST_LINK_FAILURE);
        m.put("UCS_ERR_LAST_LINK_FAILURE", (long) ERR_LAST_LINK_FAILURE);
        m.put("UCS_ERR_FIRST_ENDPOINT_FAILURE", (long) ERR_FIRST_ENDPOINT_FAILURE);
        m.put("UCS_ERR_LAST_ENDPOINT_FAILURE", (long) ERR_LAST_ENDPOINT_FAILURE);
        m.put("UCS_ERR_ALREADY_EXISTS", (long) ERR_ALREADY_EXISTS);
        m.put("UCS_ERR_NO_DEVICE", (long) ERR_NO_DEVICE);
        m.put("UCS_ERR_OUT_OF_RANGE", (long) ERR_OUT_OF_RANGE);
        m.put("UCS_ERR_EXCEEDS_LIMIT", (long) ERR_EXCEEDS_LIMIT);
    }
}
