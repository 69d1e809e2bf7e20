package io.strata.rsm;

import org.apache.kafka.common.config.ConfigException;

import javax.crypto.spec.SecretKeySpec;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.InvalidPathException;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFileAttributes;
import java.nio.file.attribute.PosixFilePermission;
import java.util.Arrays;
import java.util.Set;

/**
 * Reads the shared secret {@code K} from {@code strata.secret.file}, checked the way strata
 * tier checks its {@code tier.secret_file}. Every problem is a {@link ConfigException} naming
 * the key, the file and the fix; the secret's bytes never appear in one.
 */
final class SecretFile {
    static final int MIN_BYTES = 32;
    /** A secret file is a line of text; anything larger is the wrong file. */
    static final long MAX_FILE_BYTES = 64 * 1024;

    private SecretFile() {
    }

    static SecretKeySpec read(String key, Object raw) {
        if (raw == null) {
            throw new ConfigException(key, null, "is required: the path of the file holding the secret strata"
                + " tier reads from its tier.secret_file (at least " + MIN_BYTES + " bytes, mode 0600 or 0640)");
        }
        if (!(raw instanceof String) || ((String) raw).isBlank()) {
            throw new ConfigException(key, raw, "must be the path of the file holding the secret shared with strata tier");
        }
        String name = ((String) raw).trim();
        Path file;
        try {
            file = Path.of(name);
        } catch (InvalidPathException e) {
            throw new ConfigException(key, name, "is not a valid path: " + e.getMessage());
        }
        PosixFileAttributes attrs;
        try {
            attrs = Files.readAttributes(file, PosixFileAttributes.class);
        } catch (NoSuchFileException e) {
            throw new ConfigException(key, name, "the file does not exist: copy strata's tier.secret_file there,"
                + " then chmod 0640 " + name);
        } catch (UnsupportedOperationException e) {
            throw new ConfigException(key, name, "its permissions cannot be checked (the file system has no POSIX"
                + " modes): keep the secret on a POSIX file system with mode 0600 or 0640");
        } catch (IOException e) {
            throw new ConfigException(key, name, "cannot be read (" + e.getClass().getSimpleName()
                + "): make it readable by the broker's user, e.g. chgrp kafka " + name + "; chmod 0640 " + name);
        }
        if (!attrs.isRegularFile()) {
            throw new ConfigException(key, name, "is not a regular file: point it at the file holding the secret");
        }
        Set<PosixFilePermission> perms = attrs.permissions();
        if (perms.contains(PosixFilePermission.OTHERS_READ) || perms.contains(PosixFilePermission.OTHERS_WRITE)
                || perms.contains(PosixFilePermission.OTHERS_EXECUTE) || perms.contains(PosixFilePermission.GROUP_WRITE)) {
            throw new ConfigException(key, name, "mode " + mode(perms) + " lets other users read or change the"
                + " secret: chmod 0640 " + name + " (or 0600)");
        }
        if (attrs.size() > MAX_FILE_BYTES) {
            throw new ConfigException(key, name, "holds " + attrs.size() + " bytes, more than a secret file's "
                + MAX_FILE_BYTES + ": point it at the file holding the secret");
        }
        byte[] content;
        try {
            content = Files.readAllBytes(file);
        } catch (IOException e) {
            throw new ConfigException(key, name, "cannot be read (" + e.getClass().getSimpleName()
                + "): make it readable by the broker's user, e.g. chgrp kafka " + name + "; chmod 0640 " + name);
        }
        try {
            int from = 0;
            int to = content.length;
            while (from < to && isAsciiWhitespace(content[from])) {
                from++;
            }
            while (to > from && isAsciiWhitespace(content[to - 1])) {
                to--;
            }
            if (to - from < MIN_BYTES) {
                throw new ConfigException(key, name, "holds " + (to - from) + " bytes once surrounding whitespace is"
                    + " removed; at least " + MIN_BYTES + " are needed: write a longer secret (e.g. head -c 32"
                    + " /dev/urandom | base64 > " + name + "; chmod 0640 " + name + ") and give strata's"
                    + " tier.secret_file the same content");
            }
            byte[] secret = Arrays.copyOfRange(content, from, to);
            try {
                return TierAuth.key(secret);
            } finally {
                Arrays.fill(secret, (byte) 0);
            }
        } finally {
            Arrays.fill(content, (byte) 0);
        }
    }

    /** Space, tab, LF, FF and CR: the set Rust's {@code u8::is_ascii_whitespace} trims on strata's side. */
    private static boolean isAsciiWhitespace(byte b) {
        return b == ' ' || b == '\t' || b == '\n' || b == '\f' || b == '\r';
    }

    /** The octal mode, such as {@code 0644}, for the message. */
    private static String mode(Set<PosixFilePermission> perms) {
        int m = 0;
        for (PosixFilePermission p : perms) {
            m |= 1 << (8 - p.ordinal());
        }
        return String.format("0%03o", m);
    }
}
