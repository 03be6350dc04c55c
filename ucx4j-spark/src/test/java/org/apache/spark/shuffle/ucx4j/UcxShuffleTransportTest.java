package org.apache.spark.shuffle.ucx4j;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.List;
import java.util.stream.IntStream;
import org.junit.jupiter.api.Test;

/** The transport's pieces that need no cluster (the rest: {@link UcxShuffleClusterTest}). */
class UcxShuffleTransportTest {
    @Test
    void aFailedReplacementIsTriedAgainAfterOneSecondDoublingUpToThirty() {
        assertEquals(List.of(1000L, 2000L, 4000L, 8000L, 16000L, 30000L, 30000L, 30000L),
                IntStream.of(0, 1, 2, 3, 4, 5, 6, 40).mapToObj(UcxShuffleTransport::reopenDelayMillis).toList());
    }
}
