#!/usr/bin/env python3
"""The benchmark data set: change-data-capture messages (../shared/spec/cdc-format.md) as a
data-transfer service writes them, reproducible from a seed.

Record i (0-based) of a data set (records N, record size B, partitions P, seed S):
  - goes to partition i % P, so every partition holds N/P records (the first N % P one more),
    in the order of i;
  - key:   {"order_id":<100000000 + i>}
  - value: exactly B bytes of ASCII: a one-element JSON array with one row change of one of
           three tables (shop.orders, shop.customers, shop.payments; MySQL-style, so no SCHEMA
           and an OFFSET binlog position): TIME as yyyyMMddHHmmss, GLOBAL_ID, DATABASE, TABLE,
           TYPE I/U/D, LOGICAL_CLOCK (a decimal string), OLD_VALUES (absent for I) and
           NEW_VALUES (absent for D), every value a string, padded to B bytes by a "note"
           column of words drawn from a seeded 4096-word vocabulary (compresses about 2-3x with
           zstd, like text columns do). About 1 record in 200 is a repeat: the previous
           record of its partition sent again, byte for byte (at-least-once delivery). Below
           about 400 bytes the value is the shorter {"i":..,"note":..} (not CDC) and below 40
           bytes just words. No tabs or newlines, so `key<TAB>value` lines carry it.

Same (N, B, P, S) -> same bytes: everything is drawn from random.Random(S) in record order,
and --sha256 prints the digest of every `key<TAB>value<LF>` line in record order. Kafka
timestamps are the broker's produce time and are not part of the data set.

  gen.py --records N --record-size B --partitions P --seed S            lines of all partitions
  gen.py ... --partition p                                            lines of partition p only
  gen.py ... --sha256                                                 the digest only
"""

import argparse
import hashlib
import random
import sys

LETTERS = "abcdefghijklmnopqrstuvwxyz"
STATUSES = ["NEW", "PAID", "PACKED", "SHIPPED", "DELIVERED", "CANCELLED"]
BASE_EPOCH_MS = 1798761600000  # 2027-01-01T00:00:00Z: fixed, so TIME fields do not depend on today


TABLES = ["orders", "customers", "payments"]
# One record in this many of a partition repeats the partition's previous record.
REPEAT_EVERY = 200
# Part of a data set's identity (bench.py names its topic with it): a changed generator writes a
# new topic instead of reusing one that holds another generator's records.
VERSION = 2


def _time_str(ms):
    import datetime

    t = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)
    return t.strftime("%Y%m%d%H%M%S")


class Generator:
    """Yields (partition, key bytes, value bytes) in record order."""

    def __init__(self, records, record_size, partitions, seed):
        if records < 1 or record_size < 1 or partitions < 1:
            raise ValueError("records, record size and partitions must be at least 1")
        self.records = records
        self.size = record_size
        self.partitions = partitions
        self.rng = random.Random(seed)
        self.vocab = [
            "".join(self.rng.choices(LETTERS, k=self.rng.randint(2, 10))) for _ in range(4096)
        ]

    def _words(self, n):
        """n characters of space-separated vocabulary words."""
        if n <= 0:
            return ""
        k = n // 5 + 2
        s = " ".join(self.rng.choices(self.vocab, k=k))
        while len(s) < n:
            s += " " + " ".join(self.rng.choices(self.vocab, k=k))
        return s[:n]

    def _value(self, i):
        rng = self.rng
        kind = rng.random()
        typ = "I" if kind < 0.5 else ("U" if kind < 0.9 else "D")
        table = rng.choice(TABLES)
        ms = BASE_EPOCH_MS + i * 7 + rng.randrange(7)
        order_id = 100000000 + i
        row = (
            '{"amount":"%d.%02d","currency":"EUR","customer_id":"C%07d","items":"%d","order_id":"%d",'
            '"status":"%s","note":"' % (rng.randrange(100000), rng.randrange(100), rng.randrange(10**7),
                                      rng.randrange(1, 20), order_id, rng.choice(STATUSES))
        )
        old = ',"OLD_VALUES":{"order_id":"%d","status":"%s"}' % (order_id, rng.choice(STATUSES))
        head = (
            '[{"TIME":"%s","GLOBAL_ID":"%d","DATABASE":"shop","TABLE":"%s","TYPE":"%s",'
            '"LOGICAL_CLOCK":"%d","OFFSET":{"BINLOG_NAME":"mysql-bin.000042","BINLOG_POS":"%d"}%s'
            % (_time_str(ms), 7300000000 + i, table, typ, 1617327447310000000 + i,
               4 + i * 97, old if typ != "I" else "")
        )
        if typ == "D":
            # A delete carries the old row only: the note pads OLD_VALUES instead.
            head = head[:-1] + ',"note":"'
        else:
            head += ',"NEW_VALUES":' + row
        tail = '"}}]'
        pad = self.size - len(head) - len(tail)
        if pad >= 16:
            return head + self._words(pad) + tail
        head = '{"i":%d,"note":"' % i
        pad = self.size - len(head) - 2
        if pad >= 8:
            return head + self._words(pad) + '"}'
        return self._words(self.size)

    def __iter__(self):
        last = {}
        for i in range(self.records):
            p = i % self.partitions
            key = '{"order_id":%d}' % (100000000 + i)
            value = self._value(i)
            if (i // self.partitions) % REPEAT_EVERY == REPEAT_EVERY - 1 and p in last:
                key, value = last[p]
            assert len(value) == self.size, (len(value), self.size)
            last[p] = (key, value)
            yield p, key.encode(), value.encode()



def key_bytes(records):
    """Total bytes of the keys of a data set of this many records (keys do not depend on the seed)."""
    total, lo = 0, 100000000
    while lo < 100000000 + records:
        hi = min(10 ** len(str(lo)), 100000000 + records)
        total += (hi - lo) * len('{"order_id":%d}' % lo)
        lo = hi
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, required=True)
    ap.add_argument("--record-size", type=int, required=True)
    ap.add_argument("--partitions", type=int, required=True)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--partition", type=int, help="print only this partition's lines")
    ap.add_argument("--sha256", action="store_true", help="print the data set's digest only")
    a = ap.parse_args()
    gen = Generator(a.records, a.record_size, a.partitions, a.seed)
    out = sys.stdout.buffer
    digest = hashlib.sha256()
    for p, k, v in gen:
        line = k + b"\t" + v + b"\n"
        if a.sha256:
            digest.update(line)
        elif a.partition is None or a.partition == p:
            out.write(line)
    if a.sha256:
        print(digest.hexdigest())


if __name__ == "__main__":
    main()
