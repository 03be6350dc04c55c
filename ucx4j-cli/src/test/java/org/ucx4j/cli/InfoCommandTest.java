package org.ucx4j.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import org.junit.jupiter.api.Test;
import picocli.CommandLine;

/** {@code ucx4j info}: version, library, the transports UCX opened (transport/device) and the configuration. */
class InfoCommandTest {
    private static String run(String... args) {
        PrintStream was = System.out;
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        System.setOut(new PrintStream(out, true, StandardCharsets.UTF_8));
        try {
            assertEquals(0, new CommandLine(new InfoCommand()).execute(args));
        } finally {
            System.setOut(was);
        }
        return out.toString(StandardCharsets.UTF_8);
    }

    @Test
    void jsonListsTheTransportsUcxOpened() throws Exception {
        JsonNode info = new ObjectMapper().readTree(run("--format", "json"));
        assertTrue(info.get("available").asBoolean());
        assertTrue(info.get("version").asText().matches("1\\.\\d+\\.\\d+.*"), info.get("version").asText());
        JsonNode transports = info.get("transports");
        assertFalse(transports.isEmpty(), "no transports in " + info);
        boolean tcp = false;
        for (JsonNode t : transports) {
            assertTrue(t.asText().matches("[a-z0-9_]+/\\S+"), "transport/device: " + t);
            tcp |= t.asText().startsWith("tcp/");
        }
        assertTrue(tcp, "tcp is among " + transports);
        assertTrue(info.get("config").has("TLS"), "effective configuration");
    }

    /** A configuration UCX refuses is one line naming UCX's status, with a non-zero exit status: no stack trace. */
    @Test
    void aConfigurationUcxRefusesIsOneLineNotAStackTrace() throws Exception {
        ProcessBuilder pb = new ProcessBuilder(Main.selfCommand("info")).redirectErrorStream(true);
        pb.environment().put("UCX_TLS", "no_such_transport");
        Process p = pb.start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(p.waitFor(60, java.util.concurrent.TimeUnit.SECONDS));
        assertEquals(3, p.exitValue(), out);
        assertTrue(out.contains("ucx4j: ucp_init: UCS_ERR_"), out);
        assertFalse(out.contains("\tat "), "no stack trace: " + out);
    }

    /** Without UCX (its install dir pointed elsewhere) {@code info} gives the remedy, status 2, no stack trace. */
    @Test
    void withoutUcxInfoGivesTheRemedyNotAStackTrace() throws Exception {
        for (String format : new String[] {"text", "json"}) {
            ProcessBuilder pb = new ProcessBuilder(Main.selfCommand("info", "--format", format))
                    .redirectErrorStream(true);
            pb.environment().put("UCX4J_UCX_HOME", "/nonexistent/ucx");
            Process p = pb.start();
            String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            assertTrue(p.waitFor(60, java.util.concurrent.TimeUnit.SECONDS));
            assertEquals(2, p.exitValue(), out);
            assertTrue(out.contains("/nonexistent/ucx") && out.contains("UCX4J_UCX_HOME"), out);
            assertFalse(out.contains("\tat "), "no stack trace: " + out);
            if (format.equals("json")) {
                JsonNode info = new ObjectMapper().readTree(out.substring(out.indexOf('{')));
                assertFalse(info.get("available").asBoolean(), out);
                assertTrue(info.get("remedy").asText().contains("/nonexistent/ucx"), out);
            } else {
                assertTrue(out.contains("ucx4j: UCX is not available: "), out);
            }
        }
    }

    @Test
    void anUnknownFormatIsRefusedInOneLine() {
        java.io.StringWriter err = new java.io.StringWriter();
        CommandLine cl = Main.commandLine();
        cl.setErr(new java.io.PrintWriter(err, true));
        assertEquals(2, cl.execute("info", "--format", "yaml"));
        String text = err.toString();
        assertTrue(text.startsWith("ucx4j: ") && text.contains("Invalid value for option '--format'")
                && text.contains("yaml") && text.contains("see: ucx4j info --help"), text);
        assertEquals(1, text.strip().lines().count(), "one line: " + text);
    }

    /** Every command's usage error points to its --help: each one must take it. */
    @Test
    void everyCommandTakesHelpAndPrintsItsOwnOptions() {
        String[][] cases = {{"info", "--format"}, {"bench", "sweep"}, {"bench sweep", "--sizes"},
            {"bench send-recv", "--mode"}, {"bench spark-join", "--rows-per-partition"}};
        for (String[] c : cases) {
            java.io.StringWriter out = new java.io.StringWriter();
            CommandLine cl = Main.commandLine();
            cl.setOut(new java.io.PrintWriter(out, true));
            java.util.List<String> args = new java.util.ArrayList<>(java.util.List.of(c[0].split(" ")));
            args.add("--help");
            assertEquals(0, cl.execute(args.toArray(String[]::new)), c[0]);
            String text = out.toString();
            assertTrue(text.startsWith("Usage: ucx4j " + c[0] + " ") && text.contains(c[1]), c[0] + ": " + text);
        }
    }

    @Test
    void textNamesEachTransportUnderItsHeading() {
        String text = run();
        int at = text.indexOf("transports:\n");
        assertTrue(at >= 0, text);
        String first = text.substring(at + "transports:\n".length()).lines().findFirst().orElse("");
        assertTrue(first.trim().matches("[a-z0-9_]+/\\S+"), "first line under transports: '" + first + "'");
    }
}
