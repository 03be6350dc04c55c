package org.ucx4j;

/** Where a buffer lives, as UCX's {@code ucs_memory_type_t} names it. ucx4j allocates host memory today. */
public enum MemoryType {
    HOST(0),
    CUDA(1),
    CUDA_MANAGED(2),
    ROCM(3),
    ROCM_MANAGED(4);

    private final int ucsValue;

    MemoryType(int ucsValue) {
        this.ucsValue = ucsValue;
    }

    /** The {@code ucs_memory_type_t} value. */
    public int ucsValue() {
        return ucsValue;
    }

    /** The type for a {@code ucs_memory_type_t} value. */
    public static MemoryType ofUcs(int value) {
        for (MemoryType t : values()) {
            if (t.ucsValue == value) {
                return t;
            }
        }
        throw new IllegalArgumentException("unknown UCS memory type " + value);
    }
}
