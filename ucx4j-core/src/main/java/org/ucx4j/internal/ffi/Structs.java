package org.ucx4j.internal.ffi;

import static java.lang.foreign.MemoryLayout.paddingLayout;
import static java.lang.foreign.MemoryLayout.structLayout;
import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;
import static java.lang.foreign.ValueLayout.JAVA_SHORT;

import java.lang.foreign.MemoryLayout;
import java.lang.foreign.StructLayout;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * Layouts of the UCX (1.13 API) structs ucx4j fills or reads, and the constants it uses. UCX only appends fields to
 * its {@code *_params_t} structs (guarded by {@code field_mask}), so these hold for 1.13 .. 1.20.
 * {@code StructLayoutTest} compiles a C program against the installed headers and compares every offset, size and
 * constant listed in {@link #layouts()} and {@link #constants()}.
 */
public final class Structs {
    private Structs() {}

    public static final StructLayout UCP_PARAMS = structLayout(
            JAVA_LONG.withName("field_mask"),
            JAVA_LONG.withName("features"),
            JAVA_LONG.withName("request_size"),
            ADDRESS.withName("request_init"),
            ADDRESS.withName("request_cleanup"),
            JAVA_LONG.withName("tag_sender_mask"),
            JAVA_INT.withName("mt_workers_shared"),
            paddingLayout(4),
            JAVA_LONG.withName("estimated_num_eps"),
            JAVA_LONG.withName("estimated_num_ppn"),
            ADDRESS.withName("name")).withName("ucp_params_t");

    public static final StructLayout UCP_WORKER_PARAMS = structLayout(
            JAVA_LONG.withName("field_mask"),
            JAVA_INT.withName("thread_mode"),
            paddingLayout(4),
            MemoryLayout.sequenceLayout(16, JAVA_LONG).withName("cpu_mask"),
            JAVA_INT.withName("events"),
            paddingLayout(4),
            ADDRESS.withName("user_data"),
            JAVA_INT.withName("event_fd"),
            paddingLayout(4),
            JAVA_LONG.withName("flags"),
            ADDRESS.withName("name"),
            JAVA_LONG.withName("am_alignment"),
            JAVA_LONG.withName("client_id")).withName("ucp_worker_params_t");

    public static final StructLayout UCP_WORKER_ATTR = structLayout(
            JAVA_LONG.withName("field_mask"),
            JAVA_INT.withName("thread_mode"),
            JAVA_INT.withName("address_flags"),
            ADDRESS.withName("address"),
            JAVA_LONG.withName("address_length"),
            JAVA_LONG.withName("max_am_header")).withName("ucp_worker_attr_t");

    public static final StructLayout UCP_ERR_HANDLER = structLayout(
            ADDRESS.withName("cb"), ADDRESS.withName("arg")).withName("ucp_err_handler_t");

    public static final StructLayout UCS_SOCK_ADDR = structLayout(
            ADDRESS.withName("addr"), JAVA_INT.withName("addrlen"), paddingLayout(4)).withName("ucs_sock_addr_t");

    public static final StructLayout UCP_EP_PARAMS = structLayout(
            JAVA_LONG.withName("field_mask"),
            ADDRESS.withName("address"),
            JAVA_INT.withName("err_mode"),
            paddingLayout(4),
            UCP_ERR_HANDLER.withName("err_handler"),
            ADDRESS.withName("user_data"),
            JAVA_INT.withName("flags"),
            paddingLayout(4),
            UCS_SOCK_ADDR.withName("sockaddr"),
            ADDRESS.withName("conn_request"),
            ADDRESS.withName("name"),
            UCS_SOCK_ADDR.withName("local_sockaddr")).withName("ucp_ep_params_t");

    public static final StructLayout UCP_LISTENER_CONN_HANDLER = structLayout(
            ADDRESS.withName("cb"), ADDRESS.withName("arg")).withName("ucp_listener_conn_handler_t");

    public static final StructLayout UCP_LISTENER_PARAMS = structLayout(
            JAVA_LONG.withName("field_mask"),
            UCS_SOCK_ADDR.withName("sockaddr"),
            UCP_LISTENER_CONN_HANDLER.withName("accept_handler"),
            UCP_LISTENER_CONN_HANDLER.withName("conn_handler")).withName("ucp_listener_params_t");

    public static final long SOCKADDR_STORAGE_SIZE = 128;
    /** Bytes ucx4j leaves for a {@code ucs_memory_info_t} (the memory-type cache's answer; 24 in 1.13 to 1.20). */
    public static final long UCS_MEMORY_INFO_ROOM = 32;

    public static final StructLayout UCP_LISTENER_ATTR = structLayout(
            JAVA_LONG.withName("field_mask"),
            MemoryLayout.sequenceLayout(SOCKADDR_STORAGE_SIZE, java.lang.foreign.ValueLayout.JAVA_BYTE)
                    .withName("sockaddr")).withName("ucp_listener_attr_t");

    public static final StructLayout UCP_CONN_REQUEST_ATTR = structLayout(
            JAVA_LONG.withName("field_mask"),
            MemoryLayout.sequenceLayout(SOCKADDR_STORAGE_SIZE, java.lang.foreign.ValueLayout.JAVA_BYTE)
                    .withName("client_address"),
            JAVA_LONG.withName("client_id")).withName("ucp_conn_request_attr_t");

    /** {@code ucp_context_attr_t} up to {@code name} (1.20 appends {@code device_counter_size}). */
    public static final StructLayout UCP_CONTEXT_ATTR = structLayout(
            JAVA_LONG.withName("field_mask"),
            JAVA_LONG.withName("request_size"),
            JAVA_INT.withName("thread_mode"),
            paddingLayout(4),
            JAVA_LONG.withName("memory_types"),
            MemoryLayout.sequenceLayout(32, java.lang.foreign.ValueLayout.JAVA_BYTE).withName("name"))
            .withName("ucp_context_attr_t");

    public static final StructLayout UCP_REQUEST_PARAM = structLayout(
            JAVA_INT.withName("op_attr_mask"),
            JAVA_INT.withName("flags"),
            ADDRESS.withName("request"),
            ADDRESS.withName("cb"),
            JAVA_LONG.withName("datatype"),
            ADDRESS.withName("user_data"),
            ADDRESS.withName("reply_buffer"),
            JAVA_INT.withName("memory_type"),
            paddingLayout(4),
            ADDRESS.withName("recv_info"),
            ADDRESS.withName("memh")).withName("ucp_request_param_t");

    public static final StructLayout UCP_TAG_RECV_INFO = structLayout(
            JAVA_LONG.withName("sender_tag"), JAVA_LONG.withName("length")).withName("ucp_tag_recv_info_t");

    public static final StructLayout UCP_AM_HANDLER_PARAM = structLayout(
            JAVA_LONG.withName("field_mask"),
            JAVA_INT.withName("id"),
            JAVA_INT.withName("flags"),
            ADDRESS.withName("cb"),
            ADDRESS.withName("arg")).withName("ucp_am_handler_param_t");

    public static final StructLayout UCP_AM_RECV_PARAM = structLayout(
            JAVA_LONG.withName("recv_attr"), ADDRESS.withName("reply_ep")).withName("ucp_am_recv_param_t");

    public static final StructLayout UCP_DT_IOV = structLayout(
            ADDRESS.withName("buffer"), JAVA_LONG.withName("length")).withName("ucp_dt_iov_t");

    /** Fields of 1.13; 1.15+ appends {@code exported_memh_buffer}, unused here. */
    public static final StructLayout UCP_MEM_MAP_PARAMS = structLayout(
            JAVA_LONG.withName("field_mask"),
            ADDRESS.withName("address"),
            JAVA_LONG.withName("length"),
            JAVA_INT.withName("flags"),
            JAVA_INT.withName("prot"),
            JAVA_INT.withName("memory_type"),
            paddingLayout(4)).withName("ucp_mem_map_params_t");

    public static final StructLayout UCP_MEM_ATTR = structLayout(
            JAVA_LONG.withName("field_mask"),
            ADDRESS.withName("address"),
            JAVA_LONG.withName("length"),
            JAVA_INT.withName("mem_type"),
            paddingLayout(4)).withName("ucp_mem_attr_t");

    public static final StructLayout SOCKADDR_IN = structLayout(
            JAVA_SHORT.withName("sin_family"),
            JAVA_SHORT.withName("sin_port"),
            JAVA_INT.withName("sin_addr"),
            paddingLayout(8)).withName("struct sockaddr_in");

    public static final StructLayout SOCKADDR_IN6 = structLayout(
            JAVA_SHORT.withName("sin6_family"),
            JAVA_SHORT.withName("sin6_port"),
            JAVA_INT.withName("sin6_flowinfo"),
            MemoryLayout.sequenceLayout(16, java.lang.foreign.ValueLayout.JAVA_BYTE).withName("sin6_addr"),
            JAVA_INT.withName("sin6_scope_id")).withName("struct sockaddr_in6");

    // ---- offsets used by the engine (derived from the layouts, checked by the test)
    public static final long PARAMS_FIELD_MASK = off(UCP_PARAMS, "field_mask");
    public static final long PARAMS_FEATURES = off(UCP_PARAMS, "features");
    public static final long PARAMS_MT_WORKERS_SHARED = off(UCP_PARAMS, "mt_workers_shared");
    public static final long PARAMS_NAME = off(UCP_PARAMS, "name");
    public static final long WP_FIELD_MASK = off(UCP_WORKER_PARAMS, "field_mask");
    public static final long WP_THREAD_MODE = off(UCP_WORKER_PARAMS, "thread_mode");
    public static final long WP_EVENTS = off(UCP_WORKER_PARAMS, "events");
    public static final long WP_NAME = off(UCP_WORKER_PARAMS, "name");
    public static final long EP_FIELD_MASK = off(UCP_EP_PARAMS, "field_mask");
    public static final long EP_ERR_MODE = off(UCP_EP_PARAMS, "err_mode");
    public static final long EP_ERR_HANDLER_CB = off(UCP_EP_PARAMS, "err_handler") + off(UCP_ERR_HANDLER, "cb");
    public static final long EP_ERR_HANDLER_ARG = off(UCP_EP_PARAMS, "err_handler") + off(UCP_ERR_HANDLER, "arg");
    public static final long EP_FLAGS = off(UCP_EP_PARAMS, "flags");
    public static final long EP_ADDRESS = off(UCP_EP_PARAMS, "address");
    public static final long EP_SOCKADDR_ADDR = off(UCP_EP_PARAMS, "sockaddr") + off(UCS_SOCK_ADDR, "addr");
    public static final long EP_SOCKADDR_LEN = off(UCP_EP_PARAMS, "sockaddr") + off(UCS_SOCK_ADDR, "addrlen");
    public static final long EP_CONN_REQUEST = off(UCP_EP_PARAMS, "conn_request");
    public static final long EP_NAME = off(UCP_EP_PARAMS, "name");
    public static final long LP_FIELD_MASK = off(UCP_LISTENER_PARAMS, "field_mask");
    public static final long LP_SOCKADDR_ADDR = off(UCP_LISTENER_PARAMS, "sockaddr") + off(UCS_SOCK_ADDR, "addr");
    public static final long LP_SOCKADDR_LEN = off(UCP_LISTENER_PARAMS, "sockaddr") + off(UCS_SOCK_ADDR, "addrlen");
    public static final long LP_CONN_CB = off(UCP_LISTENER_PARAMS, "conn_handler") + off(UCP_LISTENER_CONN_HANDLER, "cb");
    public static final long LP_CONN_ARG = off(UCP_LISTENER_PARAMS, "conn_handler") + off(UCP_LISTENER_CONN_HANDLER, "arg");
    public static final long LA_FIELD_MASK = off(UCP_LISTENER_ATTR, "field_mask");
    public static final long LA_SOCKADDR = off(UCP_LISTENER_ATTR, "sockaddr");
    public static final long CRA_FIELD_MASK = off(UCP_CONN_REQUEST_ATTR, "field_mask");
    public static final long CRA_CLIENT_ADDRESS = off(UCP_CONN_REQUEST_ATTR, "client_address");
    public static final long CA_FIELD_MASK = off(UCP_CONTEXT_ATTR, "field_mask");
    public static final long CA_MEMORY_TYPES = off(UCP_CONTEXT_ATTR, "memory_types");
    public static final long UCP_ATTR_FIELD_MEMORY_TYPES = 1L << 2;
    public static final long WA_FIELD_MASK = off(UCP_WORKER_ATTR, "field_mask");
    public static final long WA_MAX_AM_HEADER = off(UCP_WORKER_ATTR, "max_am_header");
    public static final long UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER = 1L << 3;
    public static final long UCP_WORKER_ATTR_FIELD_ADDRESS = 1L << 1;
    public static final long WA_ADDRESS = off(UCP_WORKER_ATTR, "address");
    public static final long WA_ADDRESS_LENGTH = off(UCP_WORKER_ATTR, "address_length");
    public static final long RP_OP_ATTR_MASK = off(UCP_REQUEST_PARAM, "op_attr_mask");
    public static final long RP_FLAGS = off(UCP_REQUEST_PARAM, "flags");
    public static final long RP_CB = off(UCP_REQUEST_PARAM, "cb");
    public static final long RP_USER_DATA = off(UCP_REQUEST_PARAM, "user_data");
    public static final long RP_MEMORY_TYPE = off(UCP_REQUEST_PARAM, "memory_type");
    public static final long RP_RECV_INFO = off(UCP_REQUEST_PARAM, "recv_info");
    public static final long RP_DATATYPE = off(UCP_REQUEST_PARAM, "datatype");
    public static final long AHP_FIELD_MASK = off(UCP_AM_HANDLER_PARAM, "field_mask");
    public static final long AHP_ID = off(UCP_AM_HANDLER_PARAM, "id");
    public static final long AHP_FLAGS = off(UCP_AM_HANDLER_PARAM, "flags");
    public static final long AHP_CB = off(UCP_AM_HANDLER_PARAM, "cb");
    public static final long AHP_ARG = off(UCP_AM_HANDLER_PARAM, "arg");
    public static final long ARP_RECV_ATTR = off(UCP_AM_RECV_PARAM, "recv_attr");
    public static final long IOV_BUFFER = off(UCP_DT_IOV, "buffer");
    public static final long IOV_LENGTH = off(UCP_DT_IOV, "length");
    public static final long MMP_FIELD_MASK = off(UCP_MEM_MAP_PARAMS, "field_mask");
    public static final long MMP_ADDRESS = off(UCP_MEM_MAP_PARAMS, "address");
    public static final long MMP_LENGTH = off(UCP_MEM_MAP_PARAMS, "length");
    public static final long MMP_FLAGS = off(UCP_MEM_MAP_PARAMS, "flags");
    public static final long MMP_PROT = off(UCP_MEM_MAP_PARAMS, "prot");
    public static final long MA_FIELD_MASK = off(UCP_MEM_ATTR, "field_mask");
    public static final long MA_ADDRESS = off(UCP_MEM_ATTR, "address");
    public static final long MA_LENGTH = off(UCP_MEM_ATTR, "length");
    public static final long MMP_MEMORY_TYPE = off(UCP_MEM_MAP_PARAMS, "memory_type");
    public static final long TRI_SENDER_TAG = off(UCP_TAG_RECV_INFO, "sender_tag");
    public static final long TRI_LENGTH = off(UCP_TAG_RECV_INFO, "length");

    // ---- constants (UCX 1.13 headers; checked by the test)
    public static final int UCP_API_MAJOR = 1;
    public static final int UCP_API_MINOR = 13;
    public static final long UCP_PARAM_FIELD_FEATURES = 1L;
    public static final long UCP_PARAM_FIELD_MT_WORKERS_SHARED = 1L << 5;
    public static final long UCP_PARAM_FIELD_NAME = 1L << 8;
    public static final long UCP_FEATURE_TAG = 1L;
    public static final long UCP_FEATURE_RMA = 1L << 1;
    public static final long UCP_FEATURE_WAKEUP = 1L << 4;
    public static final long UCP_FEATURE_STREAM = 1L << 5;
    public static final long UCP_FEATURE_AM = 1L << 6;
    public static final long UCP_WORKER_PARAM_FIELD_THREAD_MODE = 1L;
    public static final long UCP_WORKER_PARAM_FIELD_EVENTS = 1L << 2;
    public static final long UCP_WORKER_PARAM_FIELD_NAME = 1L << 6;
    public static final int UCS_THREAD_MODE_SINGLE = 0;
    public static final int UCS_THREAD_MODE_SERIALIZED = 1;
    public static final int UCP_WAKEUP_TAG_SEND = 1 << 2;
    public static final int UCP_WAKEUP_TAG_RECV = 1 << 3;
    public static final int UCP_WAKEUP_TX = 1 << 10;
    public static final int UCP_WAKEUP_RX = 1 << 11;
    public static final long UCP_EP_PARAM_FIELD_REMOTE_ADDRESS = 1L << 0;
    public static final long UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE = 1L << 1;
    public static final long UCP_EP_PARAM_FIELD_ERR_HANDLER = 1L << 2;
    public static final long UCP_EP_PARAM_FIELD_SOCK_ADDR = 1L << 4;
    public static final long UCP_EP_PARAM_FIELD_FLAGS = 1L << 5;
    public static final long UCP_EP_PARAM_FIELD_CONN_REQUEST = 1L << 6;
    public static final long UCP_EP_PARAM_FIELD_NAME = 1L << 7;
    public static final int UCP_EP_PARAMS_FLAGS_CLIENT_SERVER = 1;
    public static final int UCP_ERR_HANDLING_MODE_NONE = 0;
    public static final int UCP_ERR_HANDLING_MODE_PEER = 1;
    public static final int UCP_EP_CLOSE_FLAG_FORCE = 1;
    public static final long UCP_LISTENER_PARAM_FIELD_SOCK_ADDR = 1L;
    public static final long UCP_LISTENER_PARAM_FIELD_CONN_HANDLER = 1L << 2;
    public static final long UCP_LISTENER_ATTR_FIELD_SOCKADDR = 1L;
    public static final long UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR = 1L;
    public static final int UCP_OP_ATTR_FIELD_CALLBACK = 1 << 1;
    public static final int UCP_OP_ATTR_FIELD_USER_DATA = 1 << 2;
    public static final int UCP_OP_ATTR_FIELD_DATATYPE = 1 << 3;
    public static final int UCP_OP_ATTR_FIELD_FLAGS = 1 << 4;
    public static final int UCP_OP_ATTR_FIELD_MEMORY_TYPE = 1 << 6;
    public static final int UCP_OP_ATTR_FIELD_RECV_INFO = 1 << 7;
    public static final int UCP_OP_ATTR_FLAG_NO_IMM_CMPL = 1 << 16;
    public static final int UCP_OP_ATTR_FLAG_FAST_CMPL = 1 << 17;
    public static final int UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL = 1 << 18;
    public static final int UCP_STREAM_RECV_FLAG_WAITALL = 1;
    public static final long UCP_AM_HANDLER_PARAM_FIELD_ID = 1L;
    public static final long UCP_AM_HANDLER_PARAM_FIELD_FLAGS = 1L << 1;
    public static final long UCP_AM_HANDLER_PARAM_FIELD_CB = 1L << 2;
    public static final long UCP_AM_HANDLER_PARAM_FIELD_ARG = 1L << 3;
    public static final int UCP_AM_FLAG_WHOLE_MSG = 1;
    public static final long UCP_AM_RECV_ATTR_FLAG_DATA = 1L << 16;
    public static final long UCP_AM_RECV_ATTR_FLAG_RNDV = 1L << 17;
    public static final int UCP_AM_SEND_FLAG_REPLY = 1;
    public static final int UCP_AM_SEND_FLAG_EAGER = 1 << 1;
    public static final long UCP_DATATYPE_IOV = 2;
    public static final long UCP_MEM_MAP_PARAM_FIELD_ADDRESS = 1L;
    public static final long UCP_MEM_MAP_PARAM_FIELD_LENGTH = 1L << 1;
    public static final long UCP_MEM_MAP_PARAM_FIELD_FLAGS = 1L << 2;
    public static final long UCP_MEM_MAP_PARAM_FIELD_PROT = 1L << 3;
    public static final int UCP_MEM_MAP_ALLOCATE = 1 << 1;
    public static final long UCP_MEM_ATTR_FIELD_ADDRESS = 1L;
    public static final long UCP_MEM_ATTR_FIELD_LENGTH = 1L << 1;
    public static final long UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE = 1L << 4;
    public static final int UCP_MEM_MAP_PROT_LOCAL_READ = 1;
    public static final int UCP_MEM_MAP_PROT_LOCAL_WRITE = 1 << 1;
    public static final int UCP_MEM_MAP_PROT_REMOTE_READ = 1 << 8;
    public static final int UCP_MEM_MAP_PROT_REMOTE_WRITE = 1 << 9;
    public static final int UCS_MEMORY_TYPE_HOST = 0;
    public static final int UCS_CONFIG_PRINT_CONFIG = 1;
    public static final int UCS_CONFIG_PRINT_HIDDEN = 1 << 3;
    public static final int UCS_CONFIG_PRINT_HEADER = 2;
    public static final int AF_INET = 2;
    public static final int AF_INET6 = 10;

    static long off(StructLayout l, String field) {
        return l.byteOffset(MemoryLayout.PathElement.groupElement(field));
    }

    private static void put(Map<String, long[]> m, StructLayout l, String... fields) {
        m.put(l.name().orElseThrow(), new long[] {0, l.byteSize()});
        for (String f : fields) {
            MemoryLayout.PathElement p = MemoryLayout.PathElement.groupElement(f);
            m.put(l.name().orElseThrow() + "." + f, new long[] {l.byteOffset(p), l.select(p).byteSize()});
        }
    }

    /**
     * Every struct and field ucx4j relies on, keyed as the C check prints them ({@code ucp_ep_params_t.err_mode}),
     * with {offset, size}. Structs that UCX may grow (params, attrs) are checked for "Java size <= C size".
     */
    public static Map<String, long[]> layouts() {
        Map<String, long[]> m = new LinkedHashMap<>();
        put(m, UCP_PARAMS, "field_mask", "features", "request_size", "request_init", "request_cleanup",
                "tag_sender_mask", "mt_workers_shared", "estimated_num_eps", "estimated_num_ppn", "name");
        put(m, UCP_WORKER_PARAMS, "field_mask", "thread_mode", "cpu_mask", "events", "user_data", "event_fd",
                "flags", "name");
        put(m, UCP_EP_PARAMS, "field_mask", "address", "err_mode", "err_handler", "user_data", "flags", "sockaddr",
                "conn_request", "name");
        put(m, UCP_WORKER_ATTR, "field_mask", "thread_mode", "address_flags", "address", "address_length",
                "max_am_header");
        put(m, UCP_CONTEXT_ATTR, "field_mask", "request_size", "thread_mode", "memory_types", "name");
        put(m, UCP_ERR_HANDLER, "cb", "arg");
        put(m, UCS_SOCK_ADDR, "addr", "addrlen");
        put(m, UCP_LISTENER_PARAMS, "field_mask", "sockaddr", "accept_handler", "conn_handler");
        put(m, UCP_LISTENER_CONN_HANDLER, "cb", "arg");
        put(m, UCP_LISTENER_ATTR, "field_mask", "sockaddr");
        put(m, UCP_CONN_REQUEST_ATTR, "field_mask", "client_address");
        put(m, UCP_REQUEST_PARAM, "op_attr_mask", "flags", "request", "cb", "datatype", "user_data",
                "reply_buffer", "memory_type", "recv_info", "memh");
        put(m, UCP_TAG_RECV_INFO, "sender_tag", "length");
        put(m, UCP_AM_HANDLER_PARAM, "field_mask", "id", "flags", "cb", "arg");
        put(m, UCP_AM_RECV_PARAM, "recv_attr", "reply_ep");
        put(m, UCP_DT_IOV, "buffer", "length");
        put(m, UCP_MEM_MAP_PARAMS, "field_mask", "address", "length", "flags", "prot", "memory_type");
        put(m, UCP_MEM_ATTR, "field_mask", "address", "length", "mem_type");
        put(m, SOCKADDR_IN, "sin_family", "sin_port", "sin_addr");
        put(m, SOCKADDR_IN6, "sin6_family", "sin6_port", "sin6_flowinfo", "sin6_addr", "sin6_scope_id");
        return m;
    }

    /** Every constant ucx4j hard-codes, keyed by its C name. */
    public static Map<String, Long> constants() {
        Map<String, Long> m = new LinkedHashMap<>();
        m.put("UCP_API_MAJOR", (long) UCP_API_MAJOR);
        m.put("SIZEOF_UCS_STATUS_T", 1L); // Ucp.status: one byte, sign-extended
        m.put("SOCKADDR_STORAGE_SIZE", SOCKADDR_STORAGE_SIZE);
        m.put("UCS_MEMORY_INFO_ROOM", UCS_MEMORY_INFO_ROOM);
        m.put("UCP_API_MINOR", (long) UCP_API_MINOR);
        m.put("UCP_PARAM_FIELD_FEATURES", UCP_PARAM_FIELD_FEATURES);
        m.put("UCP_PARAM_FIELD_NAME", UCP_PARAM_FIELD_NAME);
        m.put("UCP_PARAM_FIELD_MT_WORKERS_SHARED", UCP_PARAM_FIELD_MT_WORKERS_SHARED);
        m.put("UCP_ATTR_FIELD_MEMORY_TYPES", UCP_ATTR_FIELD_MEMORY_TYPES);
        m.put("UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER", UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER);
        m.put("UCP_WORKER_ATTR_FIELD_ADDRESS", UCP_WORKER_ATTR_FIELD_ADDRESS);
        m.put("UCP_FEATURE_TAG", UCP_FEATURE_TAG);
        m.put("UCP_FEATURE_RMA", UCP_FEATURE_RMA);
        m.put("UCP_FEATURE_WAKEUP", UCP_FEATURE_WAKEUP);
        m.put("UCP_FEATURE_STREAM", UCP_FEATURE_STREAM);
        m.put("UCP_FEATURE_AM", UCP_FEATURE_AM);
        m.put("UCP_WORKER_PARAM_FIELD_THREAD_MODE", UCP_WORKER_PARAM_FIELD_THREAD_MODE);
        m.put("UCP_WORKER_PARAM_FIELD_EVENTS", UCP_WORKER_PARAM_FIELD_EVENTS);
        m.put("UCP_WORKER_PARAM_FIELD_NAME", UCP_WORKER_PARAM_FIELD_NAME);
        m.put("UCS_THREAD_MODE_SINGLE", (long) UCS_THREAD_MODE_SINGLE);
        m.put("UCS_THREAD_MODE_SERIALIZED", (long) UCS_THREAD_MODE_SERIALIZED);
        m.put("UCP_WAKEUP_TAG_SEND", (long) UCP_WAKEUP_TAG_SEND);
        m.put("UCP_WAKEUP_TAG_RECV", (long) UCP_WAKEUP_TAG_RECV);
        m.put("UCP_WAKEUP_TX", (long) UCP_WAKEUP_TX);
        m.put("UCP_WAKEUP_RX", (long) UCP_WAKEUP_RX);
        m.put("UCP_EP_PARAM_FIELD_REMOTE_ADDRESS", UCP_EP_PARAM_FIELD_REMOTE_ADDRESS);
        m.put("UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE", UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE);
        m.put("UCP_EP_PARAM_FIELD_ERR_HANDLER", UCP_EP_PARAM_FIELD_ERR_HANDLER);
        m.put("UCP_EP_PARAM_FIELD_SOCK_ADDR", UCP_EP_PARAM_FIELD_SOCK_ADDR);
        m.put("UCP_EP_PARAM_FIELD_FLAGS", UCP_EP_PARAM_FIELD_FLAGS);
        m.put("UCP_EP_PARAM_FIELD_CONN_REQUEST", UCP_EP_PARAM_FIELD_CONN_REQUEST);
        m.put("UCP_EP_PARAM_FIELD_NAME", UCP_EP_PARAM_FIELD_NAME);
        m.put("UCP_EP_PARAMS_FLAGS_CLIENT_SERVER", (long) UCP_EP_PARAMS_FLAGS_CLIENT_SERVER);
        m.put("UCP_ERR_HANDLING_MODE_NONE", (long) UCP_ERR_HANDLING_MODE_NONE);
        m.put("UCP_ERR_HANDLING_MODE_PEER", (long) UCP_ERR_HANDLING_MODE_PEER);
        m.put("UCP_EP_CLOSE_FLAG_FORCE", (long) UCP_EP_CLOSE_FLAG_FORCE);
        m.put("UCP_LISTENER_PARAM_FIELD_SOCK_ADDR", UCP_LISTENER_PARAM_FIELD_SOCK_ADDR);
        m.put("UCP_LISTENER_PARAM_FIELD_CONN_HANDLER", UCP_LISTENER_PARAM_FIELD_CONN_HANDLER);
        m.put("UCP_LISTENER_ATTR_FIELD_SOCKADDR", UCP_LISTENER_ATTR_FIELD_SOCKADDR);
        m.put("UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR", UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR);
        m.put("UCP_OP_ATTR_FIELD_CALLBACK", (long) UCP_OP_ATTR_FIELD_CALLBACK);
        m.put("UCP_OP_ATTR_FIELD_USER_DATA", (long) UCP_OP_ATTR_FIELD_USER_DATA);
        m.put("UCP_OP_ATTR_FIELD_DATATYPE", (long) UCP_OP_ATTR_FIELD_DATATYPE);
        m.put("UCP_OP_ATTR_FIELD_FLAGS", (long) UCP_OP_ATTR_FIELD_FLAGS);
        m.put("UCP_OP_ATTR_FIELD_MEMORY_TYPE", (long) UCP_OP_ATTR_FIELD_MEMORY_TYPE);
        m.put("UCP_OP_ATTR_FIELD_RECV_INFO", (long) UCP_OP_ATTR_FIELD_RECV_INFO);
        m.put("UCP_OP_ATTR_FLAG_NO_IMM_CMPL", (long) UCP_OP_ATTR_FLAG_NO_IMM_CMPL);
        m.put("UCP_OP_ATTR_FLAG_FAST_CMPL", (long) UCP_OP_ATTR_FLAG_FAST_CMPL);
        m.put("UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL", (long) UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL);
        m.put("UCP_STREAM_RECV_FLAG_WAITALL", (long) UCP_STREAM_RECV_FLAG_WAITALL);
        m.put("UCP_AM_HANDLER_PARAM_FIELD_ID", (long) UCP_AM_HANDLER_PARAM_FIELD_ID);
        m.put("UCP_AM_HANDLER_PARAM_FIELD_FLAGS", (long) UCP_AM_HANDLER_PARAM_FIELD_FLAGS);
        m.put("UCP_AM_HANDLER_PARAM_FIELD_CB", (long) UCP_AM_HANDLER_PARAM_FIELD_CB);
        m.put("UCP_AM_HANDLER_PARAM_FIELD_ARG", (long) UCP_AM_HANDLER_PARAM_FIELD_ARG);
        m.put("UCP_AM_FLAG_WHOLE_MSG", (long) UCP_AM_FLAG_WHOLE_MSG);
        m.put("UCP_AM_RECV_ATTR_FLAG_DATA", (long) UCP_AM_RECV_ATTR_FLAG_DATA);
        m.put("UCP_AM_RECV_ATTR_FLAG_RNDV", (long) UCP_AM_RECV_ATTR_FLAG_RNDV);
        m.put("UCP_AM_SEND_FLAG_REPLY", (long) UCP_AM_SEND_FLAG_REPLY);
        m.put("UCP_AM_SEND_FLAG_EAGER", (long) UCP_AM_SEND_FLAG_EAGER);
        m.put("UCP_DATATYPE_IOV", (long) UCP_DATATYPE_IOV);
        m.put("UCP_MEM_MAP_PARAM_FIELD_ADDRESS", (long) UCP_MEM_MAP_PARAM_FIELD_ADDRESS);
        m.put("UCP_MEM_MAP_PARAM_FIELD_LENGTH", (long) UCP_MEM_MAP_PARAM_FIELD_LENGTH);
        m.put("UCP_MEM_MAP_PARAM_FIELD_FLAGS", (long) UCP_MEM_MAP_PARAM_FIELD_FLAGS);
        m.put("UCP_MEM_MAP_PARAM_FIELD_PROT", (long) UCP_MEM_MAP_PARAM_FIELD_PROT);
        m.put("UCP_MEM_MAP_ALLOCATE", (long) UCP_MEM_MAP_ALLOCATE);
        m.put("UCP_MEM_ATTR_FIELD_ADDRESS", (long) UCP_MEM_ATTR_FIELD_ADDRESS);
        m.put("UCP_MEM_ATTR_FIELD_LENGTH", (long) UCP_MEM_ATTR_FIELD_LENGTH);
        m.put("UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE", (long) UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE);
        m.put("UCP_MEM_MAP_PROT_LOCAL_READ", (long) UCP_MEM_MAP_PROT_LOCAL_READ);
        m.put("UCP_MEM_MAP_PROT_LOCAL_WRITE", (long) UCP_MEM_MAP_PROT_LOCAL_WRITE);
        m.put("UCP_MEM_MAP_PROT_REMOTE_READ", (long) UCP_MEM_MAP_PROT_REMOTE_READ);
        m.put("UCP_MEM_MAP_PROT_REMOTE_WRITE", (long) UCP_MEM_MAP_PROT_REMOTE_WRITE);
        m.put("UCS_MEMORY_TYPE_HOST", (long) UCS_MEMORY_TYPE_HOST);
        m.put("UCS_CONFIG_PRINT_CONFIG", (long) UCS_CONFIG_PRINT_CONFIG);
        m.put("UCS_CONFIG_PRINT_HIDDEN", (long) UCS_CONFIG_PRINT_HIDDEN);
        m.put("UCS_CONFIG_PRINT_HEADER", (long) UCS_CONFIG_PRINT_HEADER);
        m.put("AF_INET", (long) AF_INET);
        m.put("AF_INET6", (long) AF_INET6);
        Status.constants(m);
        return m;
    }
}
