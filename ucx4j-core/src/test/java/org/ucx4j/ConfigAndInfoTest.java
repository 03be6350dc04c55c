package org.ucx4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Map;
import org.junit.jupiter.api.Test;

/** UCX-Py's test_config / test_info: version, effective configuration with options, info text. */
class ConfigAndInfoTest {
    @Test
    void versionIsAtLeastTheMinimum() {
        String[] v = Ucx.version().split("\\.");
        assertEquals(3, v.length, Ucx.version());
        int major = Integer.parseInt(v[0]), minor = Integer.parseInt(v[1]);
        assertTrue(major > 1 || (major == 1 && minor >= 13), Ucx.version());
        assertNotNull(Ucx.libraryLocation());
    }

    @Test
    void optionsShowInTheEffectiveConfigWithOrWithoutPrefix() {
        Map<String, String> defaults = Ucx.config(UcxOptions.defaults());
        assertTrue(defaults.containsKey("TLS") && defaults.containsKey("RNDV_THRESH"), defaults.keySet().toString());
        UcxOptions o = UcxOptions.defaults().with("UCX_RNDV_THRESH", "12345").with("RNDV_THRESH_FALLBACK", "4K");
        Map<String, String> c = Ucx.config(o);
        assertEquals("12345", c.get("RNDV_THRESH"));
        assertEquals("4K", c.get("RNDV_THRESH_FALLBACK"));
        try (Ucx ucx = Ucx.open(o)) {
            assertEquals("12345", ucx.config().get("RNDV_THRESH"), "an open instance reports its own options");
        }
    }

    @Test
    void aRefusedOptionIsAConfigErrorNamingIt() {
        UcxOptions bad = UcxOptions.defaults().with("RNDV_THRESH", "not-a-size");
        ConfigException e = assertThrows(ConfigException.class, () -> Ucx.config(bad));
        assertTrue(e.getMessage().contains("RNDV_THRESH") && e.getMessage().contains("UCS_ERR"), e.getMessage());
        assertThrows(ConfigException.class, () -> Ucx.open(bad));
        assertThrows(IllegalArgumentException.class, () -> UcxOptions.defaults().with(" ", "x"));
    }

    @Test
    void infoDescribesContextAndWorker() {
        try (Ucx ucx = Ucx.open()) {
            String info = ucx.info();
            assertTrue(info.contains("ucp_context") || info.contains("UCP context"), info);
            assertTrue(info.contains("worker"), info);
            assertTrue(info.contains("posix") || info.contains("tcp") || info.contains("sysv"),
                    "lists transports: " + info);
        }
    }
}
