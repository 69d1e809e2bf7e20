#!/usr/bin/env python3
"""The dev peer's health check: a SASL-authenticated Metadata request (Python stdlib only).

    sasl_probe.py HOST:PORT USER PASSWORD_FILE [MECHANISM]     (default SCRAM-SHA-512)

Connects, authenticates (SaslHandshake v1 + SaslAuthenticate v1; SCRAM-SHA-512, SCRAM-SHA-256
per RFC 5802 including the server signature check, or PLAIN), then sends Metadata v4 for no
topics and prints "<n> brokers" on success. The password is read from the file (surrounding
whitespace stripped), never taken from the command line and never printed.

Exit: 0 = authenticated and the broker answered; 2 = the broker refused the login
(SASL_AUTHENTICATION_FAILED, or a wrong server signature); 1 = anything else (not up, refused
connection, protocol error).

Why not kcat: Debian's kcat links librdkafka 2.0.2, whose SCRAM client repeats the client nonce
in its final message (fixed in librdkafka 2.6.1, confluentinc/librdkafka#4895). Kafka 4.x
checks the nonce strictly (CVE-2024-56128), so that kcat cannot log in with SCRAM at all;
it can with PLAIN. strata's bundled librdkafka (2.12) is not affected.
"""

import base64
import hashlib
import hmac
import os
import socket
import struct
import sys

SASL_HANDSHAKE, SASL_AUTHENTICATE, METADATA = 17, 36, 3
SASL_AUTHENTICATION_FAILED = 58
CLIENT_ID = b"strata-dev-probe"


class Refused(Exception):
    pass


class Conn:
    def __init__(self, host, port, timeout):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.corr = 0

    def call(self, api_key, version, body):
        self.corr += 1
        # request header v1: api_key, api_version, correlation_id, client_id (int16 string)
        hdr = struct.pack(">hhih", api_key, version, self.corr, len(CLIENT_ID)) + CLIENT_ID
        msg = hdr + body
        self.sock.sendall(struct.pack(">i", len(msg)) + msg)
        size = struct.unpack(">i", self._read(4))[0]
        resp = self._read(size)
        corr = struct.unpack(">i", resp[:4])[0]
        if corr != self.corr:
            raise RuntimeError(f"correlation id {corr}, expected {self.corr}")
        return Reader(resp[4:])  # response header v0: correlation_id only

    def _read(self, n):
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise RuntimeError("connection closed by the broker")
            buf += chunk
        return buf


class Reader:
    def __init__(self, b):
        self.b, self.i = b, 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.b, self.i)
        self.i += struct.calcsize(fmt)
        return v[0]

    def string(self):
        n = self.take(">h")
        if n < 0:
            return None
        s = self.b[self.i:self.i + n].decode()
        self.i += n
        return s

    def bytes_(self):
        n = self.take(">i")
        if n < 0:
            return None
        s = self.b[self.i:self.i + n]
        self.i += n
        return s


def kstring(s):
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def authenticate(conn, payload):
    """One SaslAuthenticate v1 round trip; returns the server's auth bytes."""
    r = conn.call(SASL_AUTHENTICATE, 1, struct.pack(">i", len(payload)) + payload)
    err, msg = r.take(">h"), r.string()
    if err == SASL_AUTHENTICATION_FAILED:
        raise Refused(msg or "authentication failed")
    if err:
        raise RuntimeError(f"SaslAuthenticate error {err}: {msg}")
    return r.bytes_() or b""


def scram(conn, user, password, hname):
    h = getattr(hashlib, hname)
    name = user.replace("=", "=3D").replace(",", "=2C")
    cnonce = base64.b64encode(os.urandom(24)).decode().rstrip("=")
    first_bare = f"n={name},r={cnonce}"
    server_first = authenticate(conn, ("n,," + first_bare).encode()).decode()
    attrs = dict(kv.split("=", 1) for kv in server_first.split(","))
    nonce, salt, iters = attrs["r"], base64.b64decode(attrs["s"]), int(attrs["i"])
    if not nonce.startswith(cnonce):
        raise RuntimeError("server nonce does not extend the client nonce")
    salted = hashlib.pbkdf2_hmac(hname, password.encode(), salt, iters)
    client_key = hmac.new(salted, b"Client Key", h).digest()
    stored_key = h(client_key).digest()
    without_proof = f"c=biws,r={nonce}"
    auth_msg = f"{first_bare},{server_first},{without_proof}".encode()
    sig = hmac.new(stored_key, auth_msg, h).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, sig))
    final = authenticate(conn, f"{without_proof},p={base64.b64encode(proof).decode()}".encode()).decode()
    server_key = hmac.new(salted, b"Server Key", h).digest()
    want = base64.b64encode(hmac.new(server_key, auth_msg, h).digest()).decode()
    if final.startswith("e="):
        raise Refused(final[2:])
    if final != "v=" + want:
        raise Refused("wrong server signature")


def main():
    if len(sys.argv) not in (4, 5):
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 1
    hostport, user, pw_file = sys.argv[1:4]
    mech = sys.argv[4] if len(sys.argv) == 5 else "SCRAM-SHA-512"
    host, port = hostport.rsplit(":", 1)
    with open(pw_file) as f:
        password = f.read().strip()
    try:
        conn = Conn(host, int(port), timeout=5)
        r = conn.call(SASL_HANDSHAKE, 1, kstring(mech))
        err = r.take(">h")
        mechs = [r.string() for _ in range(r.take(">i"))]
        if err:
            raise RuntimeError(f"SaslHandshake error {err}; the broker enables {mechs}")
        if mech == "SCRAM-SHA-512":
            scram(conn, user, password, "sha512")
        elif mech == "SCRAM-SHA-256":
            scram(conn, user, password, "sha256")
        elif mech == "PLAIN":
            authenticate(conn, b"\0" + user.encode() + b"\0" + password.encode())
        else:
            raise RuntimeError(f"unsupported mechanism {mech}")
        # Metadata v4: no topics, allow_auto_topic_creation=false
        r = conn.call(METADATA, 4, struct.pack(">i?", 0, False))
        r.take(">i")  # throttle_time_ms
        print(f"{r.take('>i')} brokers")
        return 0
    except Refused as e:
        print(f"sasl_probe: {mech} login of {user} refused: {e}", file=sys.stderr)
        return 2
    except (OSError, RuntimeError, struct.error, KeyError, ValueError) as e:
        print(f"sasl_probe: {hostport}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
