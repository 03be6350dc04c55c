package org.ucx4j;

/** Where a buffer lives, as UCX's {@code ucs_memory_type_t} names it. ucx4j allocates host memory today. */
public enum MemoryType {
    /** Host (CPU) memory. */
    HOST(0),
    /** NVIDIA GPU memory, as {@code cudaMalloc} allocates it. */
    CUDA(1),
    /** CUDA managed (unified) memory, as {@code cudaMallocManaged} allocates it. */
    CUDA_MANAGED(2),
    /** AMD GPU memory (ROCm). */
    ROCM(3),
    /** ROCm managed memory. */
    ROCM_MANAGED(4);

    private final int ucsValue;

    MemoryType(int ucsValue) {
        this.ucsValue = ucsValue;
    }

    /** {@return the {@code ucs_memory_type_t} value} */
    public int ucsValue() {
        return ucsValue;
    }

    /**
     * The type for a {@code ucs_memory_type_t} value.
     *
     * @param value a {@code ucs_memory_type_t} value
     * @return the matching type
     * @throws IllegalArgumentException for a value that is none of these types
     */
    public static MemoryType ofUcs(int value) {
        for (MemoryType t : values()) {
            if (t.ucsValue == value) {
                return t;
            }
        }
        throw new IllegalArgumentException("unknown UCS memory type " + value);
    }
}
