package org.ucx4j;

import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;

/**
 * Settings for {@link Ucx#open(UcxOptions)}: UCX configuration (like UCX-Py's {@code ucp.init(options)}), whether
 * the environment wins over it, the progress mode and the default timeouts. Immutable; {@code with*} return copies.
 *
 * <p>ucx4j's own defaults, set as environment defaults before UCX loads (a {@code UCX_*} variable you set wins):
 * {@code UCX_POSIX_ERROR_HANDLING=y} (shared memory stays usable on endpoints with peer-failure detection) and
 * {@code UCX_KEEPALIVE_INTERVAL=1s} (a dead same-host peer is noticed within seconds). Options given here override
 * UCP-level settings; transport-level ones ({@code POSIX_*}, {@code TCP_*}) must come from the environment.
 */
public final class UcxOptions {
    private final Map<String, String> ucx;
    private final boolean environmentWins;
    private final ProgressMode progressMode;
    private final Duration connectTimeout;
    private final Duration closeTimeout;
    private final String name;

    private UcxOptions(Map<String, String> ucx, boolean environmentWins, ProgressMode progressMode,
            Duration connectTimeout, Duration closeTimeout, String name) {
        this.ucx = Map.copyOf(ucx);
        this.environmentWins = environmentWins;
        this.progressMode = progressMode;
        this.connectTimeout = connectTimeout;
        this.closeTimeout = closeTimeout;
        this.name = name;
    }

    public static UcxOptions defaults() {
        return new UcxOptions(Map.of(), false, ProgressMode.BACKOFF, Duration.ofSeconds(5), Duration.ofSeconds(1),
                "ucx4j");
    }

    /** Sets one UCX option; the key may carry the {@code UCX_} prefix or not ({@code TLS} == {@code UCX_TLS}). */
    public UcxOptions with(String key, String value) {
        Objects.requireNonNull(key, "key");
        Objects.requireNonNull(value, "value");
        Map<String, String> m = new LinkedHashMap<>(ucx);
        m.put(normalize(key), value);
        return new UcxOptions(m, environmentWins, progressMode, connectTimeout, closeTimeout, name);
    }

    /** Sets several UCX options at once. */
    public UcxOptions with(Map<String, String> options) {
        UcxOptions o = this;
        for (Map.Entry<String, String> e : options.entrySet()) {
            o = o.with(e.getKey(), e.getValue());
        }
        return o;
    }

    /** When true, a {@code UCX_*} environment variable overrides the same option given here (default false). */
    public UcxOptions withEnvironmentWins(boolean wins) {
        return new UcxOptions(ucx, wins, progressMode, connectTimeout, closeTimeout, name);
    }

    public UcxOptions withProgressMode(ProgressMode mode) {
        return new UcxOptions(ucx, environmentWins, Objects.requireNonNull(mode, "mode"), connectTimeout,
                closeTimeout, name);
    }

    /** Default timeout of {@link Ucx#connect(String, int)} (5 s). */
    public UcxOptions withConnectTimeout(Duration timeout) {
        return new UcxOptions(ucx, environmentWins, progressMode, positive(timeout, "connectTimeout"), closeTimeout,
                name);
    }

    /** How long a graceful {@link Endpoint#close()} may flush before it aborts (1 s). */
    public UcxOptions withCloseTimeout(Duration timeout) {
        return new UcxOptions(ucx, environmentWins, progressMode, connectTimeout, positive(timeout, "closeTimeout"),
                name);
    }

    /** A name for the worker and its progress thread (logs, {@code info}). */
    public UcxOptions withName(String name) {
        return new UcxOptions(ucx, environmentWins, progressMode, connectTimeout, closeTimeout,
                Objects.requireNonNull(name, "name"));
    }

    public Map<String, String> ucxOptions() {
        return ucx;
    }

    public boolean environmentWins() {
        return environmentWins;
    }

    public ProgressMode progressMode() {
        return progressMode;
    }

    public Duration connectTimeout() {
        return connectTimeout;
    }

    public Duration closeTimeout() {
        return closeTimeout;
    }

    public String name() {
        return name;
    }

    static String normalize(String key) {
        String k = key.trim();
        if (k.isEmpty()) {
            throw new IllegalArgumentException("empty UCX option name");
        }
        return k.startsWith("UCX_") ? k.substring(4) : k;
    }

    static Duration positive(Duration d, String what) {
        Objects.requireNonNull(d, what);
        if (d.isNegative() || d.isZero()) {
            throw new IllegalArgumentException(what + " must be positive, got " + d);
        }
        return d;
    }
}
