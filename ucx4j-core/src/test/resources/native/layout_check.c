/* Prints the offset and size of every struct field ucx4j relies on, and every constant it hard-codes.
 * Compiled by StructLayoutTest against the installed UCX headers; output lines: "<key> <offset> <size>". */
#include <stddef.h>
#include <stdio.h>
#include <netinet/in.h>
#include <ucp/api/ucp.h>
#if __has_include(<ucs/memory/memtype_cache.h>)
#include <ucs/memory/memtype_cache.h>
#endif

#define F(T, f) printf("%s.%s %zu %zu\n", #T, #f, offsetof(T, f), sizeof(((T *)0)->f))
#define S(T)    printf("%s %zu %zu\n", #T, (size_t)0, sizeof(T))
#define C(c)    printf("%s %lld 0\n", #c, (long long)(c))

int main(void) {
    S(ucp_params_t);
    F(ucp_params_t, field_mask); F(ucp_params_t, features); F(ucp_params_t, request_size);
    F(ucp_params_t, request_init); F(ucp_params_t, request_cleanup); F(ucp_params_t, tag_sender_mask);
    F(ucp_params_t, mt_workers_shared); F(ucp_params_t, estimated_num_eps); F(ucp_params_t, estimated_num_ppn);
    F(ucp_params_t, name);

    S(ucp_worker_params_t);
    F(ucp_worker_params_t, field_mask); F(ucp_worker_params_t, thread_mode); F(ucp_worker_params_t, cpu_mask);
    F(ucp_worker_params_t, events); F(ucp_worker_params_t, user_data); F(ucp_worker_params_t, event_fd);
    F(ucp_worker_params_t, flags); F(ucp_worker_params_t, name);

    S(ucp_ep_params_t);
    F(ucp_ep_params_t, field_mask); F(ucp_ep_params_t, address); F(ucp_ep_params_t, err_mode);
    F(ucp_ep_params_t, err_handler); F(ucp_ep_params_t, user_data); F(ucp_ep_params_t, flags);
    F(ucp_ep_params_t, sockaddr); F(ucp_ep_params_t, conn_request); F(ucp_ep_params_t, name);

    S(ucp_worker_attr_t); F(ucp_worker_attr_t, field_mask); F(ucp_worker_attr_t, thread_mode);
    F(ucp_worker_attr_t, address_flags); F(ucp_worker_attr_t, address); F(ucp_worker_attr_t, address_length);
    F(ucp_worker_attr_t, max_am_header);
    S(ucp_context_attr_t); F(ucp_context_attr_t, field_mask); F(ucp_context_attr_t, request_size);
    F(ucp_context_attr_t, thread_mode); F(ucp_context_attr_t, memory_types); F(ucp_context_attr_t, name);
    S(ucp_err_handler_t); F(ucp_err_handler_t, cb); F(ucp_err_handler_t, arg);
    S(ucs_sock_addr_t); F(ucs_sock_addr_t, addr); F(ucs_sock_addr_t, addrlen);

    S(ucp_listener_params_t);
    F(ucp_listener_params_t, field_mask); F(ucp_listener_params_t, sockaddr);
    F(ucp_listener_params_t, accept_handler); F(ucp_listener_params_t, conn_handler);
    S(ucp_listener_conn_handler_t); F(ucp_listener_conn_handler_t, cb); F(ucp_listener_conn_handler_t, arg);

    S(ucp_listener_attr_t); F(ucp_listener_attr_t, field_mask); F(ucp_listener_attr_t, sockaddr);
    S(ucp_conn_request_attr_t); F(ucp_conn_request_attr_t, field_mask); F(ucp_conn_request_attr_t, client_address);

    S(ucp_request_param_t);
    F(ucp_request_param_t, op_attr_mask); F(ucp_request_param_t, flags); F(ucp_request_param_t, request);
    F(ucp_request_param_t, cb); F(ucp_request_param_t, datatype); F(ucp_request_param_t, user_data);
    F(ucp_request_param_t, reply_buffer); F(ucp_request_param_t, memory_type); F(ucp_request_param_t, recv_info);
    F(ucp_request_param_t, memh);

    S(ucp_tag_recv_info_t); F(ucp_tag_recv_info_t, sender_tag); F(ucp_tag_recv_info_t, length);

    S(struct sockaddr_in); F(struct sockaddr_in, sin_family); F(struct sockaddr_in, sin_port);
    F(struct sockaddr_in, sin_addr);
    S(struct sockaddr_in6); F(struct sockaddr_in6, sin6_family); F(struct sockaddr_in6, sin6_port);
    F(struct sockaddr_in6, sin6_flowinfo); F(struct sockaddr_in6, sin6_addr); F(struct sockaddr_in6, sin6_scope_id);
    S(struct sockaddr_storage);

    C(UCP_API_MAJOR); C(UCP_API_MINOR); C(UCP_ATTR_FIELD_MEMORY_TYPES); C(UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER); C(UCP_WORKER_ATTR_FIELD_ADDRESS);
    C(UCP_PARAM_FIELD_FEATURES); C(UCP_PARAM_FIELD_NAME); C(UCP_PARAM_FIELD_MT_WORKERS_SHARED);
    C(UCP_FEATURE_TAG); C(UCP_FEATURE_RMA); C(UCP_FEATURE_WAKEUP); C(UCP_FEATURE_STREAM); C(UCP_FEATURE_AM);
    C(UCP_WORKER_PARAM_FIELD_THREAD_MODE); C(UCP_WORKER_PARAM_FIELD_EVENTS); C(UCP_WORKER_PARAM_FIELD_NAME);
    C(UCS_THREAD_MODE_SINGLE);
    C(UCS_THREAD_MODE_SERIALIZED);
    C(UCP_WAKEUP_TAG_SEND); C(UCP_WAKEUP_TAG_RECV); C(UCP_WAKEUP_TX); C(UCP_WAKEUP_RX);
    C(UCP_EP_PARAM_FIELD_REMOTE_ADDRESS); C(UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE); C(UCP_EP_PARAM_FIELD_ERR_HANDLER); C(UCP_EP_PARAM_FIELD_SOCK_ADDR);
    C(UCP_EP_PARAM_FIELD_FLAGS); C(UCP_EP_PARAM_FIELD_CONN_REQUEST); C(UCP_EP_PARAM_FIELD_NAME);
    C(UCP_EP_PARAMS_FLAGS_CLIENT_SERVER);
    C(UCP_ERR_HANDLING_MODE_NONE); C(UCP_ERR_HANDLING_MODE_PEER);
    C(UCP_EP_CLOSE_FLAG_FORCE);
    C(UCP_LISTENER_PARAM_FIELD_SOCK_ADDR); C(UCP_LISTENER_PARAM_FIELD_CONN_HANDLER);
    C(UCP_LISTENER_ATTR_FIELD_SOCKADDR); C(UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR);
    C(UCP_OP_ATTR_FIELD_CALLBACK); C(UCP_OP_ATTR_FIELD_USER_DATA); C(UCP_OP_ATTR_FIELD_DATATYPE);
    C(UCP_OP_ATTR_FIELD_FLAGS); C(UCP_OP_ATTR_FIELD_MEMORY_TYPE); C(UCP_OP_ATTR_FIELD_RECV_INFO);
    C(UCP_OP_ATTR_FLAG_NO_IMM_CMPL); C(UCP_OP_ATTR_FLAG_FAST_CMPL); C(UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL); C(UCP_STREAM_RECV_FLAG_WAITALL);
    C(UCS_MEMORY_TYPE_HOST);
    C(UCS_CONFIG_PRINT_HIDDEN); C(UCS_CONFIG_PRINT_CONFIG); C(UCS_CONFIG_PRINT_HEADER);
    C(AF_INET); C(AF_INET6);
    C(UCS_OK); C(UCS_INPROGRESS); C(UCS_ERR_NO_MESSAGE); C(UCS_ERR_NO_RESOURCE); C(UCS_ERR_IO_ERROR);
    C(UCS_ERR_NO_MEMORY); C(UCS_ERR_INVALID_PARAM); C(UCS_ERR_UNREACHABLE); C(UCS_ERR_INVALID_ADDR);
    C(UCS_ERR_MESSAGE_TRUNCATED); C(UCS_ERR_BUSY); C(UCS_ERR_CANCELED); C(UCS_ERR_TIMED_OUT);
    C(UCS_ERR_UNSUPPORTED); C(UCS_ERR_REJECTED); C(UCS_ERR_NOT_CONNECTED); C(UCS_ERR_CONNECTION_RESET);
    C(UCS_ERR_ENDPOINT_TIMEOUT); C(UCS_ERR_FIRST_LINK_FAILURE); C(UCS_ERR_LAST_LINK_FAILURE);
    C(UCS_ERR_FIRST_ENDPOINT_FAILURE); C(UCS_ERR_LAST_ENDPOINT_FAILURE); C(UCS_ERR_ALREADY_EXISTS);
    C(UCS_ERR_NO_DEVICE); C(UCS_ERR_OUT_OF_RANGE); C(UCS_ERR_EXCEEDS_LIMIT); C(UCS_ERR_NOT_IMPLEMENTED);
    C(UCS_ERR_NO_PROGRESS); C(UCS_ERR_BUFFER_TOO_SMALL); C(UCS_ERR_NO_ELEM); C(UCS_ERR_SOME_CONNECTS_FAILED);
    C(UCS_ERR_SHMEM_SEGMENT);
    S(ucp_am_handler_param_t);
    F(ucp_am_handler_param_t, field_mask); F(ucp_am_handler_param_t, id); F(ucp_am_handler_param_t, flags);
    F(ucp_am_handler_param_t, cb); F(ucp_am_handler_param_t, arg);
    S(ucp_am_recv_param_t); F(ucp_am_recv_param_t, recv_attr); F(ucp_am_recv_param_t, reply_ep);
    S(ucp_dt_iov_t); F(ucp_dt_iov_t, buffer); F(ucp_dt_iov_t, length);
    S(ucp_mem_map_params_t);
    F(ucp_mem_map_params_t, field_mask); F(ucp_mem_map_params_t, address); F(ucp_mem_map_params_t, length);
    F(ucp_mem_map_params_t, flags); F(ucp_mem_map_params_t, prot); F(ucp_mem_map_params_t, memory_type);
    S(ucp_mem_attr_t);
    F(ucp_mem_attr_t, field_mask); F(ucp_mem_attr_t, address); F(ucp_mem_attr_t, length);
    F(ucp_mem_attr_t, mem_type);
    C(UCP_AM_HANDLER_PARAM_FIELD_ID);
    C(UCP_AM_HANDLER_PARAM_FIELD_FLAGS);
    C(UCP_AM_HANDLER_PARAM_FIELD_CB);
    C(UCP_AM_HANDLER_PARAM_FIELD_ARG);
    C(UCP_AM_FLAG_WHOLE_MSG);
    C(UCP_AM_RECV_ATTR_FLAG_DATA);
    C(UCP_AM_RECV_ATTR_FLAG_RNDV);
    C(UCP_AM_SEND_FLAG_REPLY);
    C(UCP_AM_SEND_FLAG_EAGER);
    C(UCP_DATATYPE_IOV);
    C(UCP_MEM_MAP_PARAM_FIELD_ADDRESS);
    C(UCP_MEM_MAP_PARAM_FIELD_LENGTH);
    C(UCP_MEM_MAP_PARAM_FIELD_FLAGS);
    C(UCP_MEM_MAP_PARAM_FIELD_PROT);
    C(UCP_MEM_MAP_ALLOCATE);
    C(UCP_MEM_ATTR_FIELD_ADDRESS);
    C(UCP_MEM_ATTR_FIELD_LENGTH);
    C(UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE);
    C(UCP_MEM_MAP_PROT_LOCAL_READ);
    C(UCP_MEM_MAP_PROT_LOCAL_WRITE);
    C(UCP_MEM_MAP_PROT_REMOTE_READ);
    C(UCP_MEM_MAP_PROT_REMOTE_WRITE);
    /* sizes ucx4j assumes outside any struct: a status is one byte (Ucp.status sign-extends it), a socket address
     * buffer, and the room ucx4j leaves for the memory-type cache's answer (its header is a devel header) */
    printf("SIZEOF_UCS_STATUS_T %zu 0\n", sizeof(ucs_status_t));
    printf("SOCKADDR_STORAGE_SIZE %zu 0\n", sizeof(struct sockaddr_storage));
#if __has_include(<ucs/memory/memtype_cache.h>)
    printf("UCS_MEMORY_INFO_ROOM %zu 0\n", sizeof(ucs_memory_info_t));
#endif
    return 0;
}
