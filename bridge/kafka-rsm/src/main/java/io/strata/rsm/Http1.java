package io.strata.rsm;

import java.io.ByteArrayOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.Locale;
import java.util.function.Predicate;

/**
 * HTTP/1.1 framing as the bridge speaks it: the request head it writes, and the response it
 * reads (status line, headers, a body framed by Content-Length, chunks or the connection's end).
 * Bounds every head and every body it buffers; knows nothing of signatures or connections' fate.
 */
final class Http1 {
    /** Largest response head accepted (and longest line in it). */
    static final int HEAD_CAP = 64 * 1024;

    private Http1() {
    }

    /** A request head for {@code target} (the path with the endpoint's prefix); {@code auth} {@code null} for none. */
    static byte[] head(String method, String target, String host, TierHttp.RequestBody body, String auth) {
        StringBuilder h = new StringBuilder(200);
        h.append(method).append(' ').append(target).append(" HTTP/1.1\r\n")
            .append("Host: ").append(host).append("\r\n");
        if (body != null) {
            h.append("Content-Type: ").append(body.contentType()).append("\r\n")
                .append("Content-Length: ").append(body.length()).append("\r\n");
        }
        if (auth != null) {
            h.append("Strata-Auth: ").append(auth).append("\r\n");
        }
        h.append("\r\n");
        return h.toString().getBytes(StandardCharsets.UTF_8);
    }

    /**
     * Reads a response off {@code c}: its status (skipping 1xx interim ones), headers, then its
     * whole body (at most {@code cap} bytes) unless {@code leaveBody} says it stays in the socket.
     */
    static Raw readResponse(TierConnection c, Predicate<Raw> leaveBody, int cap) throws IOException {
        int status;
        while (true) {
            if (c.fill() < 0) {
                throw new EOFException("strata tier closed the connection before answering");
            }
            status = parseStatus(c.line());
            if (status >= 200 || status < 100) {
                break;
            }
            while (!c.line().isEmpty()) {
                // skip the headers of a 1xx interim response
            }
        }
        Raw r = new Raw(status);
        readHeaders(c, r);
        if (status == 204 || status == 304) {
            r.length = 0;
            r.chunked = false;
        }
        if (!leaveBody.test(r)) {
            r.body = readWhole(c, r, cap);
        }
        return r;
    }

    private static void readHeaders(TierConnection c, Raw r) throws IOException {
        int headBytes = 0;
        while (true) {
            String h = c.line();
            headBytes += h.length() + 2;
            if (headBytes > HEAD_CAP) {
                throw new IOException("strata tier sent a response head larger than " + HEAD_CAP + " bytes");
            }
            if (h.isEmpty()) {
                break;
            }
            int colon = h.indexOf(':');
            if (colon <= 0) {
                throw new IOException("strata tier sent a malformed header line: " + abbreviate(h));
            }
            String name = h.substring(0, colon).trim().toLowerCase(Locale.ROOT);
            String value = h.substring(colon + 1).trim();
            switch (name) {
                case "content-length":
                    long n;
                    try {
                        n = Long.parseLong(value);
                    } catch (NumberFormatException e) {
                        n = -1;
                    }
                    if (n < 0 || (r.length >= 0 && n != r.length)) {
                        throw new IOException("strata tier sent an invalid Content-Length: " + abbreviate(value));
                    }
                    r.length = n;
                    break;
                case "transfer-encoding":
                    r.chunked = value.toLowerCase(Locale.ROOT).endsWith("chunked");
                    break;
                case "connection":
                    r.keepAlive &= !value.toLowerCase(Locale.ROOT).contains("close");
                    break;
                case "strata-auth":
                    r.authRepeated |= r.auth != null;
                    r.auth = value;
                    break;
                case "content-type":
                    int semi = value.indexOf(';');
                    r.contentType = (semi < 0 ? value : value.substring(0, semi)).trim().toLowerCase(Locale.ROOT);
                    break;
                default:
                    break;
            }
        }
        if (r.chunked && r.length >= 0) {
            // Either framing could be the one a signature was made for: refuse to guess.
            throw new IOException("strata tier sent both Content-Length and Transfer-Encoding");
        }
    }

    /** The whole body of {@code r}: by its length, its chunks, or until the connection closes. */
    private static byte[] readWhole(TierConnection c, Raw r, int cap) throws IOException {
        if (r.length >= 0) {
            if (r.length > cap) {
                throw new IOException("strata tier sent a response body of " + r.length
                    + " bytes, more than the " + cap + " accepted here");
            }
            byte[] b = new byte[(int) r.length];
            c.readFully(b, 0, b.length);
            return b;
        }
        ByteArrayOutputStream all = new ByteArrayOutputStream();
        byte[] chunk = new byte[TierConnection.BUFFER_BYTES];
        while (true) {
            long size;
            if (r.chunked) {
                size = chunkSize(c);
                if (size == 0) {
                    while (!c.line().isEmpty()) {
                        // trailers are ignored
                    }
                    return all.toByteArray();
                }
            } else {
                size = Long.MAX_VALUE;
            }
            while (size > 0) {
                int n = c.read(chunk, 0, (int) Math.min(chunk.length, size));
                if (n < 0) {
                    if (r.chunked) {
                        throw new EOFException("strata tier closed the connection in the middle of a chunk");
                    }
                    return all.toByteArray();
                }
                if (all.size() + n > cap) {
                    throw new IOException("strata tier sent a response body larger than the " + cap
                        + " bytes accepted here");
                }
                all.write(chunk, 0, n);
                size -= n;
            }
            if (!c.line().isEmpty()) {
                throw new IOException("strata tier sent a malformed chunked body");
            }
        }
    }

    private static long chunkSize(TierConnection c) throws IOException {
        String sizeLine = c.line();
        int semi = sizeLine.indexOf(';');
        String hex = (semi >= 0 ? sizeLine.substring(0, semi) : sizeLine).trim();
        try {
            long size = Long.parseLong(hex, 16);
            if (size >= 0) {
                return size;
            }
        } catch (NumberFormatException e) {
            // reported below
        }
        throw new IOException("strata tier sent a malformed chunk size: " + abbreviate(sizeLine));
    }

    static int parseStatus(String line) throws IOException {
        // "HTTP/1.1 200 OK"
        if (!line.startsWith("HTTP/1.") || line.length() < 12 || line.charAt(8) != ' ') {
            throw new IOException("strata tier sent a response that is not HTTP/1.x: " + abbreviate(line));
        }
        try {
            return Integer.parseInt(line.substring(9, 12));
        } catch (NumberFormatException e) {
            throw new IOException("strata tier sent an invalid status line: " + abbreviate(line));
        }
    }

    private static String abbreviate(String s) {
        return s.length() > 200 ? s.substring(0, 200) + "..." : s;
    }

    /** A response as read off the wire, before any check. */
    static final class Raw {
        final int status;
        /** From Content-Length, or -1. */
        long length = -1;
        boolean chunked;
        boolean keepAlive = true;
        /** The Strata-Auth header, or {@code null}. */
        String auth;
        /** The Content-Type header (without parameters), or {@code null}. */
        String contentType;
        boolean authRepeated;
        /** The whole body, or {@code null} when it was left in the socket. */
        byte[] body;

        Raw(int status) {
            this.status = status;
        }

        /** Whether the connection can carry another exchange once this body is read. */
        boolean reusable() {
            return keepAlive && (chunked || length >= 0);
        }
    }
}
