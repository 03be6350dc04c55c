package org.ucx4j.internal.engine;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Random;
import java.util.Set;
import org.junit.jupiter.api.Test;

/** The set of payload addresses {@link HeldData} tracks: every member found, removed once, none lost on growth. */
class AddressSetTest {
    @Test
    void randomAddsAndRemovesMatchAJavaSet() {
        Random rnd = new Random(42);
        AddressSet set = new AddressSet();
        Set<Long> model = new HashSet<>();
        List<Long> members = new ArrayList<>();
        for (int step = 0; step < 200_000; step++) {
            // malloc-like addresses: 16-byte aligned, clustered, so that probe runs form and deletions shift them
            boolean add = members.isEmpty() || rnd.nextInt(100) < (members.size() < 300 ? 60 : 40);
            if (add) {
                long p = 0x7f00_0000_0000L + 16L * rnd.nextInt(1 << 14);
                if (model.add(p)) {
                    set.add(p);
                    members.add(p);
                }
            } else {
                long p = members.remove(rnd.nextInt(members.size()));
                model.remove(p);
                assertTrue(set.remove(p), "member 0x" + Long.toHexString(p) + " found at step " + step);
                assertFalse(set.remove(p), "removed once");
            }
            assertEquals(model.size(), set.size());
        }
        long[] got = set.toArray();
        Arrays.sort(got);
        assertArrayEquals(model.stream().mapToLong(Long::longValue).sorted().toArray(), got);
        assertFalse(set.remove(0x1234_5670L), "a stranger is no member");
    }

    @Test
    void growsPastItsFirstTableAndKeepsEveryMember() {
        AddressSet set = new AddressSet();
        for (long i = 1; i <= 10_000; i++) {
            set.add(i << 20); // 1 MiB apart, like pool blocks
        }
        assertEquals(10_000, set.size());
        for (long i = 1; i <= 10_000; i++) {
            assertTrue(set.remove(i << 20));
        }
        assertEquals(0, set.size());
        assertEquals(0, set.toArray().length);
    }
}
