package org.ucx4j.cli;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import org.ucx4j.Ucx;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/** {@code ucx4j info}: version, library, transports/devices, effective config; a remedy when UCX is missing. */
@Command(name = "info", description = "Show the UCX version, library path, transports and effective configuration.")
final class InfoCommand implements Callable<Integer> {
    enum Format { text, json }

    @Option(names = "--format", defaultValue = "text", description = "text or json")
    Format format;

    @Override
    public Integer call() throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        String cause = Ucx.unavailabilityCause();
        out.put("available", cause == null);
        if (cause != null) {
            out.put("remedy", cause);
            print(out, true);
            return 2;
        }
        out.put("version", Ucx.version());
        out.put("library", Ucx.libraryLocation());
        String info;
        List<String> transports;
        try (Ucx ucx = Ucx.open()) {
            info = ucx.info();
            transports = ucx.transports();
            out.put("config", ucx.config());
        }
        out.put("transports", transports);
        out.put("cuda", transports.stream().anyMatch(t -> t.startsWith("cuda") || t.startsWith("gdr")));
        out.put("info", info);
        print(out, false);
        return 0;
    }

    private void print(Map<String, Object> out, boolean error) throws Exception {
        if (format == Format.json) {
            System.out.println(new ObjectMapper().enable(SerializationFeature.INDENT_OUTPUT).writeValueAsString(out));
            return;
        }
        if (error) {
            System.err.println("ucx4j: UCX is not available: " + out.get("remedy"));
            return;
        }
        System.out.println("UCX version:  " + out.get("version"));
        System.out.println("library:      " + out.get("library"));
        System.out.println("CUDA:         " + out.get("cuda"));
        System.out.println("transports:");
        for (Object t : (List<?>) out.get("transports")) {
            System.out.println("  " + t);
        }
        System.out.println("effective configuration:");
        ((Map<?, ?>) out.get("config")).forEach((k, v) -> System.out.println("  UCX_" + k + "=" + v));
    }
}
