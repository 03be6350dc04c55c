package org.ucx4j.internal.ffi;

import java.lang.foreign.SymbolLookup;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

/**
 * Finds libucp/libucs. Order: system property {@code ucx4j.ucx.home}, then environment variable
 * {@code UCX4J_UCX_HOME} (a UCX install prefix: {@code <home>/lib/libucp.so.0} and friends), then the system's
 * default library search path.
 */
final class UcxLibrary {
    static final String HOME_PROPERTY = "ucx4j.ucx.home";
    static final String HOME_ENV = "UCX4J_UCX_HOME";

    final SymbolLookup ucp;
    final SymbolLookup ucs;
    final String location;

    private UcxLibrary(SymbolLookup ucp, SymbolLookup ucs, String location) {
        this.ucp = ucp;
        this.ucs = ucs;
        this.location = location;
    }

    static String configuredHome() {
        String home = System.getProperty(HOME_PROPERTY);
        if (home == null || home.isBlank()) {
            home = System.getenv(HOME_ENV);
        }
        return home == null || home.isBlank() ? null : home;
    }

    static UcxLibrary load() {
        String home = configuredHome();
        if (home != null) {
            Path dir = findLibDir(Path.of(home));
            if (dir == null) {
                throw new UnsatisfiedLinkError("no libucp.so under " + home + " (set by " + HOME_PROPERTY + " or "
                        + HOME_ENV + "); point it at a UCX >= 1.13 install prefix, or unset it to use the system's UCX");
            }
            // every UCX library by path, dependencies first: the dynamic linker then resolves libucp's and libucs's
            // dependencies to the ones already loaded (same SONAME) instead of searching LD_LIBRARY_PATH, the
            // RUNPATH and ld.so.cache, which on a host with another UCX found its libuct/libucm (a mixed install:
            // an abort on the first missing symbol, or silent ABI mismatches)
            for (String dep : List.of("libucm.so", "libucs.so", "libuct.so")) {
                Path p = pick(dir, dep);
                if (Files.exists(p)) {
                    NativeAccess.libraryByPath(p);
                }
            }
            SymbolLookup ucs = NativeAccess.libraryByPath(pick(dir, "libucs.so"));
            Path ucpPath = pick(dir, "libucp.so");
            SymbolLookup ucp = NativeAccess.libraryByPath(ucpPath);
            return new UcxLibrary(ucp, ucs, ucpPath.toString());
        }
        SymbolLookup ucs = byName("libucs.so.0", "libucs.so");
        SymbolLookup ucp = byName("libucp.so.0", "libucp.so");
        return new UcxLibrary(ucp, ucs, "libucp.so.0 (system library path)");
    }

    private static SymbolLookup byName(String... names) {
        UnsatisfiedLinkError last = null;
        for (String n : names) {
            try {
                return NativeAccess.libraryByName(n);
            } catch (IllegalArgumentException e) {
                last = new UnsatisfiedLinkError(n + ": " + e.getMessage());
            }
        }
        throw last;
    }

    private static Path findLibDir(Path home) {
        for (String sub : List.of("lib", "lib64", "lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu", "")) {
            Path d = sub.isEmpty() ? home : home.resolve(sub);
            if (Files.exists(d.resolve("libucp.so")) || Files.exists(d.resolve("libucp.so.0"))) {
                return d;
            }
        }
        return null;
    }

    private static Path pick(Path dir, String base) {
        Path p = dir.resolve(base + ".0");
        return Files.exists(p) ? p : dir.resolve(base);
    }
}
