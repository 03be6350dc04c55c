package org.ucx4j.cli;

/**
 * A command-line argument a command refuses (a value out of range, an unknown name): {@link Main} prints its
 * message in one line and exits with status 2, as for picocli's own usage errors, before anything has started.
 */
final class UsageException extends IllegalArgumentException {
    UsageException(String message) {
        super(message);
    }
}
