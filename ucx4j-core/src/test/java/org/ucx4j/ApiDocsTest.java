package org.ucx4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.spi.ToolProvider;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The public API ({@code org.ucx4j}, the module's one exported package) is documented in full: the JDK's javadoc,
 * with every doclint check on, finds no undocumented type, member, parameter, return value or thrown exception, and
 * no broken reference or HTML. The native layer ({@code org.ucx4j.internal...}) is not part of the API and not
 * checked.
 */
class ApiDocsTest {
    @Test
    void javadocWithAllDoclintChecksFindsNothingMissing(@TempDir Path out) throws Exception {
        Path sources = Path.of("src", "main", "java").toAbsolutePath();
        assertTrue(Files.isRegularFile(sources.resolve("module-info.java")), "run from ucx4j-core: " + sources);
        String slf4j = Path.of(org.slf4j.Logger.class.getProtectionDomain().getCodeSource().getLocation().toURI())
                .toString();
        ToolProvider javadoc = ToolProvider.findFirst("javadoc").orElseThrow(
                () -> new AssertionError("the JDK's javadoc tool is missing (a JRE without jdk.javadoc?)"));
        StringWriter log = new StringWriter();
        PrintWriter w = new PrintWriter(log, true);
        int status = javadoc.run(w, w, "-quiet", "-Xdoclint:all", "-Xmaxwarns", "10000", "-Xmaxerrs", "10000",
                "-d", out.toString(), "--module-path", slf4j,
                "--module-source-path", "org.ucx4j=" + sources, "--module", "org.ucx4j");
        String report = log.toString();
        long problems = report.lines().filter(l -> l.contains(": warning:") || l.contains(": error:")).count();
        assertEquals(0, problems, "javadoc -Xdoclint:all on the public API:\n" + report);
        assertEquals(0, status, report);
        assertTrue(Files.isRegularFile(out.resolve("org.ucx4j").resolve("org").resolve("ucx4j")
                .resolve("Endpoint.html")), "no page written for Endpoint");
    }
}
